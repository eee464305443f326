use super::*;

fn budget(total: usize) -> RequestBudget {
    RequestBudget::new(
        total,
        prometheus::IntGauge::new("test_budget_used", "test").expect("gauge"),
    )
}

#[tokio::test]
async fn requests_wait_while_the_budget_is_spent_and_proceed_when_it_is_returned() {
    let budget = budget(4 * REQUEST_OVERHEAD_BYTES);
    let first = budget.admit(REQUEST_OVERHEAD_BYTES).await;
    let second = budget.admit(0).await;
    assert_eq!(budget.available(), REQUEST_OVERHEAD_BYTES);
    assert_eq!(budget.used.get(), 3 * 1024);

    let waiting = tokio::spawn({
        let budget = budget.clone();
        async move { budget.admit(REQUEST_OVERHEAD_BYTES).await }
    });
    // The third request (2 KiB) does not fit in the 1 KiB left: on this single-threaded
    // test runtime the spawned task has run up to its wait after these yields.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "admitted beyond the budget");
    drop(first);
    let third = waiting.await.expect("admitted once the first finished");
    assert_eq!(budget.used.get(), 3 * 1024);
    drop((second, third));
    assert_eq!(budget.used.get(), 0);
    assert_eq!(budget.available(), 4 * REQUEST_OVERHEAD_BYTES);
}

#[tokio::test]
async fn a_request_larger_than_the_budget_is_charged_the_whole_budget_and_runs_alone() {
    let budget = budget(8 * REQUEST_OVERHEAD_BYTES);
    assert_eq!(budget.cost(1 << 20), 8 * REQUEST_OVERHEAD_BYTES);
    let big = budget.admit(1 << 20).await;
    assert_eq!(budget.available(), 0);
    drop(big);
    assert_eq!(budget.available(), 8 * REQUEST_OVERHEAD_BYTES);
}

fn request(payload_bytes: usize) -> InboundMessage {
    InboundMessage {
        topic: String::new(),
        qos: 1,
        response_topic: None,
        correlation_data: None,
        message_expiry_secs: None,
        content_type: None,
        user_properties: Vec::new(),
        payload: bytes::Bytes::from(vec![0u8; payload_bytes]),
        received_at: tokio::time::Instant::now(),
    }
}

/// A request waits while the admitted half is spent; one more than the waiting half holds
/// is refused at once and counted; when room comes back the waiting one is queued.
#[tokio::test]
async fn requests_wait_then_are_refused_once_the_waiting_room_is_full() {
    let (queue, mut queued) = mpsc::channel(8);
    let refused = prometheus::IntCounter::new("test_refused", "test").expect("counter");
    let used = prometheus::IntGauge::new("test_intake_used", "test").expect("gauge");
    // Halves of 2 KiB: one request of 1 KiB payload (cost 2 KiB) fills a half.
    let intake = Intake::new(
        queue,
        4 * REQUEST_OVERHEAD_BYTES,
        used.clone(),
        refused.clone(),
        prometheus::IntCounter::new("test_props", "test").expect("counter"),
    );
    assert_eq!(intake.deliver(request(1024)).await, Delivery::Queued);
    let first = queued.recv().await.expect("queued");
    assert_eq!(used.get(), 2048);

    let second = tokio::spawn({
        let intake = intake.clone();
        async move { intake.deliver(request(1024)).await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!second.is_finished(), "admitted beyond the admitted half");
    assert_eq!(
        used.get(),
        4096,
        "the waiting request holds the waiting half"
    );

    assert_eq!(intake.deliver(request(1)).await, Delivery::Refused);
    assert_eq!(refused.get(), 1);
    assert_eq!(used.get(), 4096, "a refused request holds nothing");

    drop(first);
    assert_eq!(second.await.expect("task"), Delivery::Queued);
    let second = queued.recv().await.expect("queued");
    assert_eq!(used.get(), 2048);
    drop(second);
    assert_eq!(used.get(), 0);
    drop(queued);
    assert_eq!(intake.deliver(request(0)).await, Delivery::Stopped);
}

/// Issue 27: a request is charged for everything it holds, not its payload alone; a
/// packet of many empty user properties costs their decoded size.
#[test]
fn a_request_is_charged_for_its_topics_correlation_and_properties() {
    let mut message = request(10);
    assert_eq!(request_bytes(&message), 10);
    message.topic = "t".repeat(20);
    message.response_topic = Some("r".repeat(30));
    message.correlation_data = Some(bytes::Bytes::from_static(&[0; 16]));
    message.content_type = Some("c".repeat(4));
    message.user_properties = vec![
        ("__srcId".to_owned(), "client".to_owned()),
        (String::new(), String::new()),
    ];
    assert_eq!(
        request_bytes(&message),
        10 + 20 + 2 * (30 + 16) + 4 + (7 + 6) + 2 * USER_PROPERTY_OVERHEAD_BYTES
    );
    assert!(
        USER_PROPERTY_OVERHEAD_BYTES >= std::mem::size_of::<(String, String)>() + 2 * 16,
        "the overhead covers the pair and two small allocations"
    );
}

#[test]
fn requests_with_too_many_user_properties_are_refused_and_counted() {
    let (queue, _queued) = mpsc::channel(1);
    let counted = prometheus::IntCounter::new("test_props", "test").expect("counter");
    let intake = Intake::new(
        queue,
        1 << 20,
        prometheus::IntGauge::new("test_used", "test").expect("gauge"),
        prometheus::IntCounter::new("test_refused", "test").expect("counter"),
        counted.clone(),
    );
    let cases: Vec<(&str, Vec<usize>, bool)> = vec![
        ("none", vec![], true),
        ("the SDK's handful", vec![20, 40, 12], true),
        ("exactly the cap", vec![0; MAX_USER_PROPERTIES], true),
        (
            "one more than the cap",
            vec![0; MAX_USER_PROPERTIES + 1],
            false,
        ),
        ("10,000 empty ones", vec![0; 10_000], false),
        ("the byte cap", vec![MAX_USER_PROPERTY_BYTES / 2; 2], true),
        (
            "one byte over",
            vec![MAX_USER_PROPERTY_BYTES / 2, MAX_USER_PROPERTY_BYTES / 2 + 1],
            false,
        ),
    ];
    let mut refused = 0;
    for (name, lengths, fits) in cases {
        assert_eq!(
            intake.screen_properties(lengths.into_iter()),
            fits,
            "{name}"
        );
        refused += u64::from(!fits);
        assert_eq!(counted.get(), refused, "{name}: counted");
    }
}

#[test]
fn a_budget_below_one_request_is_raised_to_one_request() {
    assert_eq!(budget(0).cost(0), REQUEST_OVERHEAD_BYTES);
}
