//! The request service on its own: a real single-node Raft over a temporary store, requests
//! handed straight to [`Service::handle`], replies captured by a fake [`Outbox`]. No broker, no
//! processes: what the service answers, and when it stays silent, is checked directly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use statestore_node::metrics::NodeMetrics;
use statestore_node::protocol::{ProtocolLimits, resp3};
use statestore_node::service::{Service, ServiceConfig};
use statestore_node::transport::{InboundMessage, OutboundMessage, Outbox, REQUEST_TOPIC};
use statestore_raft::{DiscardEvents, RaftConfig, RaftNode};
use statestore_storage::hlc::{SystemClock, WallClock};
use statestore_storage::sled::{Store, StoreConfig};

/// Captures what the service publishes.
#[derive(Clone, Default)]
struct FakeOutbox(Arc<Mutex<Vec<OutboundMessage>>>);

impl FakeOutbox {
    fn take(&self) -> Vec<OutboundMessage> {
        std::mem::take(&mut *self.0.lock().expect("outbox lock"))
    }
}

impl Outbox for FakeOutbox {
    async fn publish(&self, message: OutboundMessage) -> bool {
        self.0.lock().expect("outbox lock").push(message);
        true
    }
}

struct Harness {
    service: Arc<Service<FakeOutbox>>,
    outbox: FakeOutbox,
    serving: Arc<AtomicBool>,
    metrics: Arc<NodeMetrics>,
    next_correlation: u8,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// A leader of a one-node cluster, serving unless `serving` is false.
    async fn start(request_timeout: Duration) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StoreConfig::new(dir.path(), 16 << 20)).expect("store");
        let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
        let config = RaftConfig {
            id: 1,
            ..RaftConfig::default()
        };
        let raft = RaftNode::start(&config, store, Arc::new(DiscardEvents), &metrics.registry)
            .await
            .expect("raft");
        raft.bootstrap([(1, "127.0.0.1:1".to_owned())].into())
            .await
            .expect("bootstrap");
        let deadline = Instant::now() + Duration::from_secs(10);
        while raft.ensure_linearizable().await.is_err() {
            assert!(Instant::now() < deadline, "single node never led");
            tokio::task::yield_now().await;
        }
        let outbox = FakeOutbox::default();
        let serving = Arc::new(AtomicBool::new(true));
        let service = Arc::new(Service::new(
            raft,
            "statestore-test",
            outbox.clone(),
            ServiceConfig {
                protocol: ProtocolLimits::default(),
                default_dedup_window: Duration::from_secs(10),
                max_dedup_window: Duration::from_secs(600),
                node_client_id: "statestore-test".to_owned(),
                request_timeout,
            },
            metrics.clone(),
            serving.clone(),
        ));
        Harness {
            service,
            outbox,
            serving,
            metrics,
            next_correlation: 0,
            _dir: dir,
        }
    }

    fn request(&mut self, payload: &[u8], expiry_secs: Option<u32>) -> InboundMessage {
        self.next_correlation += 1;
        InboundMessage {
            topic: REQUEST_TOPIC.to_owned(),
            qos: 1,
            response_topic: Some("clients/c1/response".to_owned()),
            correlation_data: Some(Bytes::from(vec![self.next_correlation; 16])),
            message_expiry_secs: expiry_secs,
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__srcId".to_owned(), "c1".to_owned()),
                (
                    "__ts".to_owned(),
                    format!("{:015}:00000:c1", SystemClock.now_ms()),
                ),
            ],
            payload: Bytes::copy_from_slice(payload),
            received_at: Instant::now(),
        }
    }

    /// Handles `payload` and returns the replies it produced.
    async fn send(&mut self, payload: &[u8]) -> Vec<OutboundMessage> {
        let message = self.request(payload, Some(10));
        self.service.clone().handle(message).await;
        self.outbox.take()
    }

    fn dropped(&self, reason: &str) -> u64 {
        self.metrics
            .service
            .requests_dropped_total
            .with_label_values(&[reason])
            .get()
    }
}

/// A request array of bulk strings, encoded with the node's own RESP3 encoder.
fn resp(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        resp3::encode_bulk(&mut out, part);
    }
    out
}

#[tokio::test]
async fn a_serving_leader_answers_set_and_get_with_the_request_correlation() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    let replies = h.send(&resp(&[b"SET", b"k", b"v"])).await;
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    assert_eq!(replies[0].topic, "clients/c1/response");
    assert_eq!(
        replies[0].correlation_data.as_deref(),
        Some(&[h.next_correlation; 16][..])
    );
    let replies = h.send(&resp(&[b"GET", b"k"])).await;
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], b"$1\r\nv\r\n");
}

#[tokio::test]
async fn a_node_that_is_not_serving_answers_nothing_and_changes_nothing() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    h.serving.store(false, Ordering::SeqCst);
    let before = h.dropped("not_leader");
    assert!(h.send(&resp(&[b"SET", b"k", b"v"])).await.is_empty());
    assert!(h.send(&resp(&[b"GET", b"k"])).await.is_empty());
    assert_eq!(h.dropped("not_leader"), before + 2);
    h.serving.store(true, Ordering::SeqCst);
    let replies = h.send(&resp(&[b"GET", b"k"])).await;
    assert_eq!(
        &replies[0].payload[..],
        b"$-1\r\n",
        "the refused SET did nothing"
    );
}

#[tokio::test]
async fn a_request_past_its_deadline_gets_no_reply_and_is_counted() {
    // A zero request timeout: every request that has to wait for Raft is given up.
    let mut h = Harness::start(Duration::ZERO).await;
    let before = h.dropped("timed_out");
    assert!(h.send(&resp(&[b"SET", b"k", b"v"])).await.is_empty());
    assert_eq!(h.dropped("timed_out"), before + 1);
    // Malformed requests are answered at the door without waiting: still answered.
    let replies = h.send(b"*1\r\n$3\r\nFOO\r\n").await;
    assert_eq!(
        replies.len(),
        1,
        "an unknown command is refused with an error reply"
    );
}
