use super::*;
use statestore_protocol::ErrorService;

/// The `reason` labels of `statestore_server_requests_dropped_total` (dashboards and alerts name
/// them): the set the verdict type found, plus `no_vouched_identity` (issue 29). Only additions.
const DROP_REASONS: [&str; 11] = [
    "qos0",
    "no_response_topic",
    "no_correlation_data",
    "forbidden_response_topic",
    "expired",
    "not_leader",
    "timed_out",
    "overloaded",
    "too_many_properties",
    "internal",
    "no_vouched_identity",
];

/// The `result` labels besides the error replies' own.
const RESULTS: [&str; 7] = [
    "ok",
    "not_found",
    "not_applied",
    "not_leader",
    "overloaded",
    "timed_out",
    "internal",
];

fn sorted(labels: impl IntoIterator<Item = &'static str>) -> Vec<&'static str> {
    let mut labels: Vec<_> = labels.into_iter().collect();
    labels.sort_unstable();
    labels
}

#[test]
fn drop_reasons_are_every_no_reply_label_once() {
    assert_eq!(sorted(NoReply::labels()), sorted(DROP_REASONS));
}

#[test]
fn result_labels_are_the_replies_the_errors_and_the_unavailable_kinds() {
    for errors in [
        ErrorReply::of(ErrorService::StateStore),
        ErrorReply::of(ErrorService::Devicebound),
    ] {
        let expected = RESULTS
            .into_iter()
            .chain(errors.iter().map(|e| e.result_label()));
        assert_eq!(sorted(result_labels(&errors)), sorted(expected));
    }
}

#[test]
fn every_reply_shape_has_a_listed_label() {
    let shapes = [
        Reply::Ok,
        Reply::NotApplied,
        Reply::Integer(0),
        Reply::Integer(1),
        Reply::Integer(-1),
        Reply::Bulk(b"v".to_vec()),
        Reply::Nil,
    ];
    for shape in shapes {
        let label = shape.result_label();
        assert!(Reply::SUCCESS_LABELS.contains(&label), "{shape:?}: {label}");
    }
}

#[test]
fn an_encoded_answer_is_an_ok_without_version() {
    let answer = Answer::Encoded(b"*4\r\n:0\r\n:0\r\n:0\r\n:-1\r\n".to_vec());
    assert_eq!(answer.result_label(), "ok");
    assert_eq!(answer.version(), None);
    assert_eq!(answer.into_payload(), b"*4\r\n:0\r\n:0\r\n:0\r\n:-1\r\n");
}

#[test]
fn raft_errors_classify_as_their_wire_effect() {
    use statestore_raft::Error;
    let cases: Vec<(Error, &str)> = vec![
        (Error::NotLeader { leader: None }, "not_leader"),
        (Error::LeaseExpired, "not_leader"),
        (Error::Overloaded, "overloaded"),
    ];
    for (error, label) in cases {
        let shown = format!("{error:?}");
        assert_eq!(Unavailable::from(error).label(), label, "{shown}");
    }
}
