//! The session loop on the ntex thread: connect, serve, reconnect.
//!
//! Publishes go out in the order they were queued within each lane (per-key notification order
//! and per-device delivery order depend on it), replies before pushes: one loop sends them with
//! the non-blocking QoS 1 API after waiting for send credit, preferring the replies lane, and a
//! FIFO of what was sent matches the broker's in-order PUBACKs. Each entry of that FIFO holds
//! its message's charge of the outbound budget until its PUBACK arrives (or the connection
//! ends).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ntex_bytes::{ByteString, Bytes as NtexBytes};
use ntex_io::IoBoxed;
use ntex_mqtt::Control;
use ntex_mqtt::v5::client::{Client, Connect, MqttConnector, ProtocolMessage};
use ntex_mqtt::v5::codec::{
    self, PublishAckReason, RetainHandling, SubscribeAckReason, SubscriptionOptions,
};
use ntex_mqtt::v5::{MqttSink, QoS};
use ntex_net::connect::ConnectError;
use ntex_service::cfg::SharedCfg;
use ntex_service::{Pipeline, ServiceFactory, fn_service};
use ntex_util::time::Seconds;
use tokio::sync::{mpsc, watch};

use super::liveness::Liveness;
use super::{BrokerAddress, Command, SessionConfig, SessionEvent, SessionEvents, SessionState};
use crate::admission::{Delivery, Intake};
use crate::metrics::MqttMetrics;
use crate::outbound::pacer::{PaceLimits, Pacer, paced_bytes};
use crate::outbound::{Charge, LaneQueues, Queued};
use crate::stall::StallDetector;
use crate::transport::{
    DEVICE_FILTERS, DEVICEBOUND_REQUEST_TOPIC, InboundMessage, OutboundKind, OutboundMessage,
    PROBE_TOPIC, PubackAnswer, REQUEST_TOPIC,
};

/// The request topics the serving leader subscribes to, with the device topics (No Local:
/// the leader never reads its own deliveries back).
fn serving_filters() -> impl Iterator<Item = (&'static str, bool)> {
    [(REQUEST_TOPIC, false), (DEVICEBOUND_REQUEST_TOPIC, false)]
        .into_iter()
        .chain(DEVICE_FILTERS.into_iter().map(|filter| (filter, true)))
}

enum Ended {
    Shutdown,
    Disconnected,
}

/// What the session reads from the Tokio side: subscription changes and shutdown, and the
/// two lanes of publishes.
pub(super) struct Queues {
    pub(super) commands: mpsc::Receiver<Command>,
    pub(super) lanes: LaneQueues,
}

/// A publish sent and not yet acknowledged: what it was, when it was sent, and the room it
/// holds in the outbound budget (none for probes).
struct Sent {
    kind: OutboundKind,
    at: Instant,
    _charge: Option<Charge>,
}

/// Runs until a shutdown command (or the command channel closes).
pub(super) async fn run(
    config: SessionConfig,
    mut queues: Queues,
    requests: Intake,
    state: watch::Sender<SessionState>,
    events: SessionEvents,
    metrics: Arc<MqttMetrics>,
    stalls: Arc<StallDetector>,
) {
    let mut want_subscription = false;
    let mut backoff = config.reconnect_min;
    loop {
        metrics.set_connection_state("connecting");
        match connect(&config).await {
            Ok(client) => {
                backoff = config.reconnect_min;
                metrics.connects_total.with_label_values(&["success"]).inc();
                metrics.set_connection_state("connected");
                tracing::info!(broker = %config.broker, tls = config.tls.is_some(), client_id = %config.client_id, "connected to the MQTT broker");
                state.send_replace(SessionState {
                    connected: true,
                    request_subscription_active: false,
                });
                let session = Connected {
                    sink: client.sink(),
                    ack_timeout: config.ack_timeout,
                    bulk_pace: config.bulk_pace,
                    liveness: Rc::new(Liveness::new(config.ack_timeout, Instant::now())),
                    state: &state,
                    metrics: &metrics,
                    stalls: stalls.clone(),
                    subscribed: false,
                };
                let ended = session
                    .serve(
                        client,
                        &mut queues,
                        &mut want_subscription,
                        requests.clone(),
                        events.clone(),
                    )
                    .await;
                state.send_replace(SessionState::default());
                metrics.request_subscription_active.set(0);
                metrics.set_connection_state("disconnected");
                match ended {
                    Ended::Shutdown => return,
                    Ended::Disconnected => {
                        metrics.disconnects_total.inc();
                        tracing::warn!(broker = %config.broker, "MQTT connection lost; reconnecting");
                    }
                }
            }
            Err(err) => {
                metrics.connects_total.with_label_values(&["failure"]).inc();
                metrics.set_connection_state("disconnected");
                tracing::warn!(broker = %config.broker, error = %err, retry_in = ?backoff, "cannot connect to the MQTT broker");
                if wait_offline(backoff, &mut queues, &mut want_subscription, &metrics).await {
                    return;
                }
                backoff = (backoff * 2).min(config.reconnect_max);
            }
        }
    }
}

/// Why a connection to the broker could not be opened (logged; the session retries).
#[derive(Debug, thiserror::Error)]
enum ConnectFailure {
    /// The TCP or TLS connector could not be set up (ntex's error, as it formats it).
    #[error("connector: {0}")]
    Connector(String),
    /// The connection or the CONNECT/CONNACK exchange failed (ntex's error, as it formats it).
    #[error("{0}")]
    Handshake(String),
    /// No CONNACK within the handshake's 10 s.
    #[error("connect timed out")]
    TimedOut,
}

async fn connect(config: &SessionConfig) -> Result<Client, ConnectFailure> {
    let keep_alive = u16::try_from(config.keep_alive.as_secs()).unwrap_or(u16::MAX);
    let mut connect = Connect::new(config.broker.clone())
        .client_id(ByteString::from(config.client_id.clone()))
        .clean_start()
        .keep_alive(Seconds(keep_alive))
        .max_receive(config.receive_maximum)
        .max_packet_size(config.max_packet_size);
    if let Some(username) = &config.username {
        connect = connect.username(ByteString::from(username.clone()));
    }
    if let Some(password) = &config.password {
        connect = connect.password(NtexBytes::copy_from_slice(password.as_bytes()));
    }
    match &config.tls {
        Some(tls) => {
            handshake(
                MqttConnector::new().connector(super::tls::connector(tls)),
                connect,
            )
            .await
        }
        None => handshake(MqttConnector::new(), connect).await,
    }
}

/// Opens the connection with `connector` (plain TCP or TLS) and exchanges CONNECT/CONNACK.
async fn handshake<T>(
    connector: MqttConnector<BrokerAddress, T>,
    connect: Connect<BrokerAddress>,
) -> Result<Client, ConnectFailure>
where
    T: ServiceFactory<ntex_net::connect::Connect<BrokerAddress>, SharedCfg, Error = ConnectError>,
    T::InitError: std::fmt::Debug,
    IoBoxed: From<T::Response>,
{
    let connector = Pipeline::new(
        connector
            .create(SharedCfg::default())
            .await
            .map_err(|e| ConnectFailure::Connector(format!("{e:?}")))?,
    );
    match tokio::time::timeout(Duration::from_secs(10), connector.call(connect)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(ConnectFailure::Handshake(format!("{err:?}"))),
        Err(_) => Err(ConnectFailure::TimedOut),
    }
}

/// Waits `delay` while disconnected: publishes are dropped (nobody can receive them; their
/// room is given back), the subscription wish is recorded for the next connection. True on
/// shutdown.
async fn wait_offline(
    delay: Duration,
    queues: &mut Queues,
    want_subscription: &mut bool,
    metrics: &MqttMetrics,
) -> bool {
    let deadline = tokio::time::Instant::now() + delay;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            Some(queued) = queues.lanes.replies.recv() => metrics.publish_dropped(&queued.message.kind),
            Some(queued) = queues.lanes.bulk.recv() => metrics.publish_dropped(&queued.message.kind),
            command = queues.commands.recv() => match command {
                None => return true,
                Some(Command::Shutdown(done)) => {
                    let _ = done.send(());
                    return true;
                }
                Some(Command::RequestSubscription(wanted, done)) => {
                    *want_subscription = wanted;
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
            },
        }
    }
}

/// Replies sent in a row, while pushes wait, before one push goes out: replies come first, but
/// a steady stream of them never starves notifications and device deliveries.
const REPLIES_PER_PUSH: usize = 8;

/// How often the broker connection's liveness is checked.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// A probe publish (QoS 1; only its PUBACK matters).
fn probe() -> OutboundMessage {
    OutboundMessage {
        topic: PROBE_TOPIC.to_owned(),
        payload: bytes::Bytes::new(),
        correlation_data: None,
        response_topic: None,
        message_expiry_secs: Some(1),
        content_type: None,
        user_properties: Vec::new(),
        kind: OutboundKind::Probe,
    }
}

struct Connected<'a> {
    sink: MqttSink,
    ack_timeout: Duration,
    /// The bulk lane's rates.
    bulk_pace: PaceLimits,
    /// When the broker was last heard from (the dead-connection rule).
    liveness: Rc<Liveness>,
    state: &'a watch::Sender<SessionState>,
    metrics: &'a Arc<MqttMetrics>,
    stalls: Arc<StallDetector>,
    subscribed: bool,
}

impl Connected<'_> {
    async fn serve(
        mut self,
        client: Client,
        queues: &mut Queues,
        want_subscription: &mut bool,
        requests: Intake,
        events: SessionEvents,
    ) -> Ended {
        // What was published and when, in order; the broker acknowledges in the same order.
        let in_flight: Rc<RefCell<VecDeque<Sent>>> = Rc::default();
        let ended = self
            .serve_with(
                client,
                queues,
                want_subscription,
                requests,
                events,
                &in_flight,
            )
            .await;
        // Never acknowledged now: dropped, and their room given back.
        for sent in in_flight.borrow_mut().drain(..) {
            self.metrics.publish_dropped(&sent.kind);
        }
        ended
    }

    async fn serve_with(
        &mut self,
        client: Client,
        queues: &mut Queues,
        want_subscription: &mut bool,
        requests: Intake,
        events: SessionEvents,
        in_flight: &Rc<RefCell<VecDeque<Sent>>>,
    ) -> Ended {
        {
            let in_flight = in_flight.clone();
            let metrics = self.metrics.clone();
            let liveness = self.liveness.clone();
            self.sink.publish_ack_cb(move |ack, disconnected| {
                liveness.heard(Instant::now());
                // Its room in the outbound budget is given back here (the entry drops).
                let kind = in_flight.borrow_mut().pop_front().map(|sent| sent.kind);
                if disconnected {
                    if let Some(kind) = &kind {
                        metrics.publish_dropped(kind);
                    }
                    return;
                }
                if let Some(OutboundKind::DeviceForward { ack: waiter }) = &kind {
                    waiter.report(match ack.reason_code {
                        PublishAckReason::Success => PubackAnswer::Accepted,
                        PublishAckReason::NoMatchingSubscribers => PubackAnswer::NoSubscribers,
                        _ => PubackAnswer::Refused,
                    });
                    return;
                }
                if ack.reason_code == PublishAckReason::NoMatchingSubscribers {
                    let event = match kind {
                        Some(OutboundKind::Notification { client_id }) => {
                            Some(SessionEvent::NoMatchingSubscribers { client_id })
                        }
                        Some(OutboundKind::DeviceMessage { device, token }) => {
                            Some(SessionEvent::DeviceOffline { device, token })
                        }
                        Some(OutboundKind::Feedback { token }) => {
                            Some(SessionEvent::FeedbackUnheard { token })
                        }
                        _ => None,
                    };
                    if let Some(event) = event {
                        events.offer(event);
                    }
                }
            });
        }

        let metrics = self.metrics.clone();
        let stalls = self.stalls.clone();
        let liveness = self.liveness.clone();
        let handler = fn_service(move |message: ProtocolMessage| {
            let requests = requests.clone();
            let metrics = metrics.clone();
            let stalls = stalls.clone();
            let liveness = liveness.clone();
            async move {
                liveness.heard(Instant::now());
                match message {
                    ProtocolMessage::Publish(mut publish) => {
                        // A message read right after the process was frozen may have waited in
                        // the socket buffer all along: date it back for the expiry check.
                        // The detector keeps std time; request deadlines are Tokio instants
                        // (the same clock unless a test pauses Tokio's, which never runs this).
                        let received_at =
                            tokio::time::Instant::from_std(stalls.arrival_bound(Instant::now()));
                        let payload = publish.read_all().await.unwrap_or_default();
                        liveness.heard(Instant::now());
                        metrics.messages_received_total.inc();
                        // Too many user properties: refused before they are copied (decoded,
                        // each costs far more than its bytes on the wire).
                        let properties = &publish.packet().properties.user_properties;
                        if !requests
                            .screen_properties(properties.iter().map(|(k, v)| k.len() + v.len()))
                        {
                            tracing::debug!(
                                user_properties = properties.len(),
                                "request refused: too many user properties"
                            );
                            return Ok(publish.ack(PublishAckReason::QuotaExceeded));
                        }
                        // Moved out of the packet, which is kept only for its PUBACK: nothing
                        // of the broker's read buffer stays referenced while the request waits.
                        let inbound = inbound_message(publish.packet_mut(), payload, received_at);
                        // Bounded: the request is admitted into the request budget before its
                        // PUBACK; when the budget is spent the PUBACK waits, and the broker
                        // stops sending once our receive maximum is reached. When even the
                        // waiting room is full the request is refused (see `admission`).
                        let reason = match requests.deliver(inbound).await {
                            Delivery::Queued => PublishAckReason::Success,
                            Delivery::Refused => {
                                tracing::debug!("request refused: request budget full");
                                PublishAckReason::QuotaExceeded
                            }
                            Delivery::Stopped => {
                                tracing::debug!("request dropped: service stopped");
                                PublishAckReason::Success
                            }
                        };
                        Ok::<_, Infallible>(publish.ack(reason))
                    }
                    other => Ok(other.ack()),
                }
            }
        });
        // The dispatcher reads the socket (PUBACKs, SUBACKs, requests); it runs as its own
        // task so that waiting for an ack below never stops it.
        let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
        // The dispatcher's own events: write back-pressure (the socket's buffer full, e.g.
        // while a large message goes out) is counted, not logged (ntex-mqtt's default control
        // service logs a WARN for each); a stop is seen by the loop below.
        let backpressure = self.metrics.write_backpressure_total.clone();
        let control = fn_service(move |control: Control<Infallible>| {
            match control {
                Control::WrBackpressure(state) => {
                    if state.enabled() {
                        backpressure.inc();
                    }
                }
                Control::Stop(reason) => tracing::debug!(?reason, "MQTT dispatcher stopping"),
            }
            std::future::ready(Ok::<_, Infallible>(None))
        });
        ntex_rt::spawn(async move {
            if let Err(err) = client.start_with_control(handler, control).await {
                tracing::debug!(error = ?err, "MQTT dispatcher ended");
            }
            let _ = closed_tx.send(());
        });

        if *want_subscription && !self.set_subscription(true).await {
            return self.drop_dead_connection("SUBACK");
        }
        // ntex's keep-alive sends PINGREQs but never misses a PINGRESP: a connection whose
        // packets silently vanish would look alive for ever. Publishes are acknowledged in
        // order, so an overdue oldest unacknowledged one, with nothing else heard for as long,
        // means the broker is gone (see `liveness`); when nothing is in flight a probe is
        // published to ask.
        let mut liveness_check = tokio::time::interval(LIVENESS_CHECK);
        liveness_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut replies_in_a_row = 0usize;
        let mut pacer = Pacer::new(self.bulk_pace, tokio::time::Instant::now());
        loop {
            let now = tokio::time::Instant::now();
            let bulk_at = pacer.ready_at(now);
            let bulk_ready = bulk_at <= now;
            // The bulk lane is not starved by a steady stream of replies: after
            // `REPLIES_PER_PUSH` replies in a row, one waiting bulk message goes first (if its
            // pace allows).
            if replies_in_a_row >= REPLIES_PER_PUSH {
                replies_in_a_row = 0;
                if bulk_ready && let Ok(queued) = queues.lanes.bulk.try_recv() {
                    pacer.spend(paced_bytes(&queued.message), now);
                    if !self
                        .publish(queued.message, Some(queued.charge), in_flight)
                        .await
                    {
                        return self.drop_dead_connection("PUBACK");
                    }
                    continue;
                }
            }
            // Biased: the connection's end, then the liveness check (ready once a second),
            // subscription changes, replies, and only then the bulk lane, at its pace, so a
            // flood of notifications, deliveries or large replies never delays a small reply
            // by more than one bulk message in `REPLIES_PER_PUSH` (each lane keeps its own
            // order).
            tokio::select! {
                biased;
                _ = &mut closed => return Ended::Disconnected,
                _ = liveness_check.tick() => {
                    let oldest = in_flight.borrow().front().map(|sent| sent.at);
                    match oldest {
                        Some(sent) if self.liveness.presumed_dead(Some(sent), Instant::now()) => {
                            return self.drop_dead_connection("PUBACK");
                        }
                        Some(_) => {}
                        None => {
                            if !self.publish(probe(), None, in_flight).await {
                                return self.drop_dead_connection("PUBACK");
                            }
                        }
                    }
                }
                command = queues.commands.recv() => match command {
                    None => return self.close().await,
                    Some(Command::Shutdown(done)) => {
                        // What was queued before the shutdown still goes out.
                        if !self.flush(&mut queues.lanes, in_flight).await {
                            let _ = done.send(());
                            return self.drop_dead_connection("PUBACK");
                        }
                        let ended = self.close().await;
                        let _ = done.send(());
                        return ended;
                    }
                    Some(Command::RequestSubscription(wanted, done)) => {
                        *want_subscription = wanted;
                        let answered = self.set_subscription(wanted).await;
                        if let Some(done) = done {
                            let _ = done.send(());
                        }
                        if !answered {
                            return self.drop_dead_connection("SUBACK/UNSUBACK");
                        }
                    }
                },
                Some(queued) = queues.lanes.replies.recv() => {
                    replies_in_a_row += 1;
                    if !self.publish(queued.message, Some(queued.charge), in_flight).await {
                        return self.drop_dead_connection("PUBACK");
                    }
                }
                Some(queued) = queues.lanes.bulk.recv(), if bulk_ready => {
                    replies_in_a_row = 0;
                    pacer.spend(paced_bytes(&queued.message), tokio::time::Instant::now());
                    if !self.publish(queued.message, Some(queued.charge), in_flight).await {
                        return self.drop_dead_connection("PUBACK");
                    }
                }
                _ = tokio::time::sleep_until(bulk_at), if !bulk_ready => {
                    if !queues.lanes.bulk.is_empty() {
                        self.metrics.bulk_paced_total.inc();
                    }
                }
            }
        }
    }

    /// Publishes what both lanes hold right now, replies first. False if the broker stopped
    /// answering meanwhile.
    async fn flush(&self, lanes: &mut LaneQueues, in_flight: &RefCell<VecDeque<Sent>>) -> bool {
        for lane in [&mut lanes.replies, &mut lanes.bulk] {
            while let Ok(Queued { message, charge }) = lane.try_recv() {
                if !self.publish(message, Some(charge), in_flight).await {
                    return false;
                }
            }
        }
        true
    }

    /// Publishes `message` (QoS 1), keeping its `charge` until the PUBACK. False when the
    /// broker's receive window stayed full until the connection was presumed dead (an overdue
    /// PUBACK and nothing heard for an ack timeout; otherwise a full window would block this
    /// loop, liveness checks included, for ever).
    async fn publish(
        &self,
        message: OutboundMessage,
        charge: Option<Charge>,
        in_flight: &RefCell<VecDeque<Sent>>,
    ) -> bool {
        if !self.sink.is_ready() {
            let waiting_since = Instant::now();
            let ready = self.sink.ready();
            tokio::pin!(ready);
            loop {
                match tokio::time::timeout(LIVENESS_CHECK, &mut ready).await {
                    Ok(true) => break,
                    Ok(false) => {
                        // Closed: the dispatcher's end is reported by the `closed` branch.
                        self.metrics.publish_dropped(&message.kind);
                        return true;
                    }
                    Err(_) => {
                        // The window is full of unacknowledged publishes; the oldest decides.
                        let oldest = in_flight.borrow().front().map(|sent| sent.at);
                        let oldest = oldest.unwrap_or(waiting_since);
                        if self.liveness.presumed_dead(Some(oldest), Instant::now()) {
                            self.metrics.publish_dropped(&message.kind);
                            return false;
                        }
                    }
                }
            }
        }
        let OutboundMessage {
            topic,
            payload,
            correlation_data,
            response_topic,
            message_expiry_secs,
            content_type,
            user_properties,
            kind,
        } = message;
        let builder = self.sink.publish(ByteString::from(topic)).properties(|p| {
            p.correlation_data = correlation_data.map(|c| NtexBytes::copy_from_slice(&c));
            p.response_topic = response_topic.map(ByteString::from);
            p.message_expiry_interval = message_expiry_secs.and_then(NonZeroU32::new);
            p.content_type = content_type.map(ByteString::from_static);
            p.user_properties = user_properties
                .into_iter()
                .map(|(k, v)| {
                    let name = match k {
                        std::borrow::Cow::Borrowed(k) => ByteString::from_static(k),
                        std::borrow::Cow::Owned(k) => ByteString::from(k),
                    };
                    (name, ByteString::from(v))
                })
                .collect();
        });
        let label = kind.label();
        in_flight.borrow_mut().push_back(Sent {
            kind,
            at: Instant::now(),
            _charge: charge,
        });
        match builder.send_at_least_once_no_block(NtexBytes::copy_from_slice(&payload)) {
            Ok(()) => self
                .metrics
                .messages_sent_total
                .with_label_values(&[label])
                .inc(),
            Err(err) => {
                // Not sent: its room is given back with the entry.
                in_flight.borrow_mut().pop_back();
                self.metrics
                    .publish_failures_total
                    .with_label_values(&[label])
                    .inc();
                tracing::debug!(error = ?err, "publish failed");
            }
        }
        true
    }

    /// Subscribes or unsubscribes; false if the broker did not answer within the ack timeout
    /// (the connection is then presumed dead).
    async fn set_subscription(&mut self, wanted: bool) -> bool {
        if wanted == self.subscribed {
            return true;
        }
        if wanted {
            let mut subscribe = self.sink.subscribe(None);
            for (filter, no_local) in serving_filters() {
                let options = SubscriptionOptions {
                    qos: QoS::AtLeastOnce,
                    no_local,
                    retain_as_published: false,
                    retain_handling: RetainHandling::NoAtSubscribe,
                };
                subscribe = subscribe.topic_filter(ByteString::from_static(filter), options);
            }
            let subscribe = subscribe.send();
            let Ok(answer) = tokio::time::timeout(self.ack_timeout, subscribe).await else {
                tracing::warn!(timeout = ?self.ack_timeout, "no SUBACK from the broker");
                return false;
            };
            match answer {
                Ok(ack)
                    if ack
                        .status
                        .iter()
                        .all(|s| *s == SubscribeAckReason::GrantedQos1) =>
                {
                    self.subscribed = true;
                    tracing::info!(topic = REQUEST_TOPIC, "holding the request subscription");
                }
                Ok(ack) => {
                    tracing::error!(status = ?ack.status, "broker refused the request subscription")
                }
                Err(err) => tracing::warn!(error = ?err, "request subscription failed"),
            }
        } else {
            let mut unsubscribe = self.sink.unsubscribe();
            for (filter, _) in serving_filters() {
                unsubscribe = unsubscribe.topic_filter(ByteString::from_static(filter));
            }
            let unsubscribe = unsubscribe.send();
            // Unanswered, the subscription goes with the connection, which is dropped next.
            let answered = match tokio::time::timeout(self.ack_timeout, unsubscribe).await {
                Ok(Ok(_)) => {
                    tracing::info!(topic = REQUEST_TOPIC, "released the request subscription");
                    true
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = ?err, "unsubscribe failed; dropping the connection");
                    true
                }
                Err(_) => {
                    tracing::warn!(timeout = ?self.ack_timeout, "no UNSUBACK from the broker");
                    false
                }
            };
            self.subscribed = false;
            self.publish_state();
            return answered;
        }
        self.publish_state();
        true
    }

    fn publish_state(&self) {
        self.metrics
            .request_subscription_active
            .set(i64::from(self.subscribed));
        self.state.send_replace(SessionState {
            connected: true,
            request_subscription_active: self.subscribed,
        });
    }

    async fn close(&mut self) -> Ended {
        if self.subscribed {
            self.set_subscription(false).await;
        }
        self.sink.close();
        Ended::Shutdown
    }

    /// Closes a connection the broker stopped answering on (`what` it did not send back).
    fn drop_dead_connection(&mut self, what: &str) -> Ended {
        tracing::warn!(
            timeout = ?self.ack_timeout,
            silent = ?self.liveness.silent_for(Instant::now()),
            missing = what,
            "the broker stopped answering; dropping the connection"
        );
        self.subscribed = false;
        self.sink.close();
        Ended::Disconnected
    }
}

/// The request in `packet` as plain data, its topic and properties moved out of the packet.
fn inbound_message(
    packet: &mut codec::Publish,
    payload: NtexBytes,
    received_at: tokio::time::Instant,
) -> InboundMessage {
    let properties = std::mem::take(&mut packet.properties);
    InboundMessage {
        topic: std::mem::take(&mut packet.topic).to_string(),
        qos: match packet.qos {
            QoS::AtMostOnce => 0,
            QoS::AtLeastOnce => 1,
            QoS::ExactlyOnce => 2,
        },
        response_topic: properties.response_topic.map(|t| t.to_string()),
        correlation_data: properties
            .correlation_data
            .map(|c| bytes::Bytes::copy_from_slice(&c)),
        message_expiry_secs: properties.message_expiry_interval.map(NonZeroU32::get),
        content_type: properties.content_type.map(|c| c.to_string()),
        user_properties: properties
            .user_properties
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        payload: bytes::Bytes::copy_from_slice(&payload),
        received_at,
    }
}
