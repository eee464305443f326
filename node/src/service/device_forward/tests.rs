//! The forward of device publishes that reach a node which no longer serves: which are
//! forwarded, what the copy carries, and how the broker's answers drive the retries, through a
//! scripted fake outbox on a paused clock.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;

use super::*;
use statestore_protocol::devicebound::parse_device_topic;

const SETTLE: &str = "devices/dev-1/messages/settle/complete/m8000000000000000abcdef";
const RECEIVE: &str = "devices/dev-1/messages/receive";
const ACTIVITY: &str = "devices/dev-1/messages/events";

fn inbound(topic: &str, properties: &[(&str, &str)], envelope: bool) -> InboundMessage {
    InboundMessage {
        topic: topic.to_owned(),
        qos: 1,
        response_topic: envelope.then(|| "devices/dev-1/replies".to_owned()),
        correlation_data: envelope.then(|| Bytes::from_static(b"\x00corr")),
        message_expiry_secs: Some(30),
        content_type: Some("text/plain".to_owned()),
        user_properties: properties
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
        payload: Bytes::from_static(b"payload"),
        received_at: Instant::now(),
    }
}

#[test]
fn settlements_and_answerable_pulls_are_forwarded_once_activity_never() {
    let marked = [(FORWARD_MARK, "node-2")];
    let cases = [
        (SETTLE, &[][..], false, Decision::Forward),
        (SETTLE, &[][..], true, Decision::Forward),
        (SETTLE, &marked[..], true, Decision::Looped),
        (RECEIVE, &[][..], true, Decision::Forward),
        (RECEIVE, &marked[..], true, Decision::Looped),
        (RECEIVE, &[][..], false, Decision::Drop),
        (RECEIVE, &marked[..], false, Decision::Drop),
        (ACTIVITY, &[][..], true, Decision::Drop),
        (ACTIVITY, &marked[..], false, Decision::Drop),
    ];
    for (topic, properties, envelope, expected) in cases {
        let message = inbound(topic, properties, envelope);
        let parsed = parse_device_topic(topic).expect("a device topic");
        assert_eq!(
            decide(&parsed, &message, envelope),
            expected,
            "{topic} {properties:?} envelope {envelope}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_copy_is_the_publish_with_the_mark_and_the_rest_of_its_expiry() {
    let message = inbound(SETTLE, &[("__srcId", "dev-1"), ("x", "1")], true);
    tokio::time::advance(Duration::from_millis(2_500)).await;
    let (ack, _answer) = PubackWaiter::channel();
    let copy = forwarded_copy(&message, "node-1", Instant::now(), ack.clone()).expect("alive");
    assert_eq!(copy.topic, SETTLE);
    assert_eq!(copy.payload, message.payload);
    assert_eq!(copy.correlation_data, message.correlation_data);
    assert_eq!(copy.response_topic, message.response_topic);
    assert_eq!(
        copy.message_expiry_secs,
        Some(28),
        "27.5 s left, rounded up"
    );
    let properties: Vec<(&str, &str)> = copy
        .user_properties
        .iter()
        .map(|(name, value)| (name.as_ref(), value.as_str()))
        .collect();
    assert_eq!(
        properties,
        [("__srcId", "dev-1"), ("x", "1"), (FORWARD_MARK, "node-1")]
    );
    assert_eq!(copy.kind, OutboundKind::DeviceForward { ack });

    let forever = InboundMessage {
        message_expiry_secs: None,
        ..message.clone()
    };
    let (ack, _answer) = PubackWaiter::channel();
    let copy = forwarded_copy(&forever, "node-1", Instant::now(), ack).expect("no expiry");
    assert_eq!(copy.message_expiry_secs, None);

    tokio::time::advance(Duration::from_millis(27_500)).await;
    let (ack, _answer) = PubackWaiter::channel();
    assert!(
        forwarded_copy(&message, "node-1", Instant::now(), ack).is_none(),
        "expired"
    );
}

/// What a fake broker answers to each publish: `None` drops the publish unanswered.
struct ScriptedOutbox {
    script: Mutex<VecDeque<Option<PubackAnswer>>>,
    /// (when, the copy without its waiter)
    published: Mutex<Vec<(Instant, OutboundMessage)>>,
}

impl ScriptedOutbox {
    fn new(script: impl IntoIterator<Item = Option<PubackAnswer>>) -> Self {
        ScriptedOutbox {
            script: Mutex::new(script.into_iter().collect()),
            published: Mutex::default(),
        }
    }

    fn published(&self) -> Vec<(Instant, OutboundMessage)> {
        self.published.lock().expect("lock").clone()
    }
}

impl Outbox for ScriptedOutbox {
    async fn publish(&self, message: OutboundMessage) -> bool {
        let OutboundKind::DeviceForward { ack } = &message.kind else {
            panic!("not a forward: {:?}", message.kind)
        };
        let ack = ack.clone();
        let recorded = OutboundMessage {
            kind: OutboundKind::Probe,
            ..message
        };
        self.published
            .lock()
            .expect("lock")
            .push((Instant::now(), recorded));
        // An exhausted script: nobody ever subscribes.
        let answer = self
            .script
            .lock()
            .expect("lock")
            .pop_front()
            .unwrap_or(Some(PubackAnswer::NoSubscribers));
        if let Some(answer) = answer {
            ack.report(answer);
        }
        true
    }
}

async fn run(
    outbox: &ScriptedOutbox,
    message: &InboundMessage,
    serving: &(dyn Fn() -> bool + Sync),
) -> (Forwarded, usize) {
    let retries = AtomicUsize::new(0);
    let on_retry = || {
        retries.fetch_add(1, Ordering::SeqCst);
    };
    let forwarded = forward(
        Forwarder {
            outbox,
            node: "node-1",
            serving,
            session: None,
            on_retry: &on_retry,
        },
        message,
    )
    .await;
    (forwarded, retries.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn a_forward_nobody_took_is_published_again_until_a_leader_takes_it() {
    let outbox = ScriptedOutbox::new([
        Some(PubackAnswer::NoSubscribers),
        None, // the connection dropped before the PUBACK
        Some(PubackAnswer::Accepted),
    ]);
    let message = inbound(SETTLE, &[("__srcId", "dev-1")], true);
    let start = Instant::now();
    assert_eq!(
        run(&outbox, &message, &|| false).await,
        (Forwarded::Forwarded, 2)
    );
    let published = outbox.published();
    let at: Vec<Duration> = published.iter().map(|(at, _)| *at - start).collect();
    assert_eq!(
        at,
        [Duration::ZERO, FIRST_RETRY, FIRST_RETRY + FIRST_RETRY * 2],
        "the pause doubles"
    );
    for (_, copy) in &published {
        assert_eq!(copy.topic, SETTLE);
        assert_eq!(copy.correlation_data, message.correlation_data);
        assert!(
            copy.user_properties
                .iter()
                .any(|(name, value)| name == FORWARD_MARK && value == "node-1")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_forward_stops_when_refused_served_here_expired_or_after_its_time() {
    let message = inbound(SETTLE, &[], false);

    let refused = ScriptedOutbox::new([Some(PubackAnswer::Refused)]);
    assert_eq!(
        run(&refused, &message, &|| false).await,
        (Forwarded::Refused, 0)
    );
    assert_eq!(refused.published().len(), 1, "not published again");

    // This node serves again after the first 0x10: it handles the publish itself.
    let serving = AtomicBool::new(false);
    let outbox = ScriptedOutbox::new([Some(PubackAnswer::NoSubscribers)]);
    let serves_after_first = || {
        let published = !outbox.published.lock().expect("lock").is_empty();
        serving.store(published, Ordering::SeqCst);
        serving.load(Ordering::SeqCst)
    };
    assert_eq!(
        run(&outbox, &message, &serves_after_first).await,
        (Forwarded::Served, 0)
    );
    assert_eq!(outbox.published().len(), 1);

    // Nobody ever subscribes: given up within FORWARD_FOR, the pauses capped.
    let start = Instant::now();
    let never = ScriptedOutbox::new([]);
    let (forwarded, retries) = run(&never, &message, &|| false).await;
    assert_eq!(forwarded, Forwarded::GaveUp);
    let published = never.published();
    assert_eq!(retries + 1, published.len());
    let last = published
        .last()
        .map(|(at, _)| *at - start)
        .expect("published");
    assert!(last < FORWARD_FOR, "{last:?}");
    assert!(start.elapsed() <= FORWARD_FOR, "{:?}", start.elapsed());
    for pair in published.windows(2) {
        assert!(pair[1].0 - pair[0].0 <= MAX_RETRY);
    }
    // At 0, 50, 150, 350 and 750 ms, then every 800 ms up to 4.75 s; the next would pass 5 s.
    assert_eq!(published.len(), 10, "{published:?}");

    // A publish with 1 s left: expired before its time is up.
    let short = InboundMessage {
        message_expiry_secs: Some(1),
        ..inbound(SETTLE, &[], false)
    };
    let never = ScriptedOutbox::new([]);
    assert_eq!(run(&never, &short, &|| false).await.0, Forwarded::Expired);
    assert_eq!(never.published().len(), 5, "at 0, 50, 150, 350 and 750 ms");
}

#[tokio::test(start_paused = true)]
async fn a_forward_waits_until_this_node_no_longer_subscribes() {
    let (state, session) = watch::channel(SessionState {
        connected: true,
        request_subscription_active: true,
    });
    let outbox = std::sync::Arc::new(ScriptedOutbox::new([Some(PubackAnswer::Accepted)]));
    let message = inbound(SETTLE, &[], false);
    let task = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            forward(
                Forwarder {
                    outbox: &*outbox,
                    node: "node-1",
                    serving: &|| false,
                    session: Some(session),
                    on_retry: &|| {},
                },
                &message,
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        outbox.published().is_empty(),
        "not while this node's own subscription could swallow it"
    );
    state.send_replace(SessionState {
        connected: true,
        request_subscription_active: false,
    });
    assert_eq!(task.await.expect("joins"), Forwarded::Forwarded);
    assert_eq!(outbox.published().len(), 1);
}

#[test]
fn every_result_has_its_metric_label() {
    for result in [
        Forwarded::Forwarded,
        Forwarded::Served,
        Forwarded::Expired,
        Forwarded::Refused,
        Forwarded::GaveUp,
    ] {
        assert!(
            crate::device_metrics::FORWARD_RESULTS.contains(&result.label()),
            "{result:?}"
        );
    }
    for label in ["retried", "looped"] {
        assert!(crate::device_metrics::FORWARD_RESULTS.contains(&label));
    }
}
