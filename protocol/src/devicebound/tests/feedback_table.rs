//! Feedback records and batches (devicebound.md §4): field names, order and
//! values exactly, status codes, JSON escaping, the batch's properties.

use crate::devicebound::feedback::{
    DeadLetterReason, ENQUEUED_TIME_PROPERTY, FEEDBACK_CONTENT_TYPE, FEEDBACK_TOPIC,
    FeedbackRecord, FeedbackStatus, encode_feedback_batch, feedback_user_properties,
};

fn record(status: FeedbackStatus) -> FeedbackRecord<'static> {
    FeedbackRecord {
        original_message_id: "0987654321",
        outcome_at_ms: 1_438_100_688_789,
        status,
        device_id: "123",
        device_generation_id: Some("abcdefghijklmnopqrstuvwxyz"),
    }
}

#[test]
fn section_4_one_record_is_byte_exact() {
    let batch = encode_feedback_batch(&[record(FeedbackStatus::Success)]);
    assert_eq!(
        String::from_utf8(batch).expect("JSON is UTF-8"),
        r#"[{"originalMessageId":"0987654321","enqueuedTimeUtc":"2015-07-28T16:24:48.789Z","statusCode":"Success","description":"Success","deviceId":"123","deviceGenerationId":"abcdefghijklmnopqrstuvwxyz"}]"#
    );
}

#[test]
fn section_4_every_status_code_and_its_description() {
    let expected = [
        (FeedbackStatus::Success, "Success"),
        (FeedbackStatus::Expired, "Expired"),
        (
            FeedbackStatus::DeliveryCountExceeded,
            "DeliveryCountExceeded",
        ),
        (FeedbackStatus::Rejected, "Rejected"),
        (FeedbackStatus::Purged, "Purged"),
    ];
    let statuses: Vec<FeedbackStatus> = expected.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, FeedbackStatus::ALL);
    let records: Vec<FeedbackRecord> = statuses.iter().map(|&status| record(status)).collect();
    let batch: serde_json::Value =
        serde_json::from_slice(&encode_feedback_batch(&records)).expect("valid JSON");
    let batch = batch.as_array().expect("an array");
    assert_eq!(batch.len(), 5);
    for ((status, text), json) in expected.iter().zip(batch) {
        assert_eq!(status.as_str(), *text);
        assert_eq!(json["statusCode"], *text, "{status:?}");
        assert_eq!(json["description"], *text, "{status:?}");
        let mut fields: Vec<&str> = json
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        let mut sorted_expected = [
            "originalMessageId",
            "enqueuedTimeUtc",
            "statusCode",
            "description",
            "deviceId",
            "deviceGenerationId",
        ];
        sorted_expected.sort_unstable();
        assert_eq!(fields, sorted_expected, "exactly the six fields");
    }
}

#[test]
fn section_4_text_is_escaped_by_json_and_generation_defaults_to_empty() {
    let records = [FeedbackRecord {
        original_message_id: "quote\" backslash\\ newline\n tab\t \u{1} \u{e9}",
        outcome_at_ms: 0,
        status: FeedbackStatus::Purged,
        device_id: "d'(1)",
        device_generation_id: None,
    }];
    let bytes = encode_feedback_batch(&records);
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(
        text.contains(r#""originalMessageId":"quote\" backslash\\ newline\n tab\t \u0001 é""#),
        "{text}"
    );
    let parsed: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
    assert_eq!(
        parsed[0]["originalMessageId"],
        records[0].original_message_id
    );
    assert_eq!(parsed[0]["enqueuedTimeUtc"], "1970-01-01T00:00:00.000Z");
    assert_eq!(parsed[0]["deviceId"], "d'(1)");
    assert_eq!(parsed[0]["deviceGenerationId"], "");
}

#[test]
fn section_4_batches_keep_record_order_and_an_empty_batch_is_an_empty_array() {
    assert_eq!(encode_feedback_batch(&[]), b"[]");
    let records = [
        FeedbackRecord {
            original_message_id: "first",
            ..record(FeedbackStatus::Expired)
        },
        FeedbackRecord {
            original_message_id: "second",
            ..record(FeedbackStatus::Rejected)
        },
    ];
    let parsed: serde_json::Value =
        serde_json::from_slice(&encode_feedback_batch(&records)).expect("valid JSON");
    assert_eq!(parsed[0]["originalMessageId"], "first");
    assert_eq!(parsed[1]["originalMessageId"], "second");
}

#[test]
fn section_4_batch_publish_properties() {
    assert_eq!(FEEDBACK_TOPIC, "messages/servicebound/feedback");
    assert_eq!(
        FEEDBACK_CONTENT_TYPE,
        "application/vnd.microsoft.iothub.feedback.json"
    );
    assert_eq!(ENQUEUED_TIME_PROPERTY, "iothub-enqueuedtime");
    assert_eq!(
        feedback_user_properties("batch-lt-7", 1_438_100_688_789),
        vec![
            ("$.lt".to_owned(), "batch-lt-7".to_owned()),
            (
                "iothub-enqueuedtime".to_owned(),
                "2015-07-28T16:24:48.789Z".to_owned()
            ),
        ]
    );
}

#[test]
fn section_1_dead_letter_reasons_use_the_status_text() {
    let cases = [
        (
            DeadLetterReason::Expired,
            FeedbackStatus::Expired,
            "Expired",
        ),
        (
            DeadLetterReason::DeliveryCountExceeded,
            FeedbackStatus::DeliveryCountExceeded,
            "DeliveryCountExceeded",
        ),
        (
            DeadLetterReason::Rejected,
            FeedbackStatus::Rejected,
            "Rejected",
        ),
    ];
    for (reason, status, text) in cases {
        assert_eq!(reason.feedback_status(), status);
        assert_eq!(reason.as_str(), text);
    }
    assert_eq!(DeadLetterReason::ALL.len(), cases.len());
}
