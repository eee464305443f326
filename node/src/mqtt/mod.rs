//! The MQTT 5 session: the only module that imports ntex-mqtt.
//!
//! ntex is single-threaded and `!Send`, so the session runs on its own OS thread inside an
//! ntex `System` and talks to the Tokio side through channels: requests flow out as
//! [`crate::transport::InboundMessage`]s admitted into the request budget, publishes flow in
//! through the two lanes of an [`Outlet`] (each charged to the outbound budget until its
//! PUBACK), subscription changes as commands, connection state is a watch, and notification
//! PUBACKs with reason 0x10 come back as [`SessionEvent`]s. It reconnects with exponential
//! backoff and restores the request subscription whenever the service wants it. With TLS
//! ([`tls`]) every connection takes the latest certificate files.

mod events;
mod liveness;
mod session;
mod tls;

pub use events::{SESSION_EVENT_QUEUE, SessionEventQueues, SessionEvents};
pub use tls::watch_tls_files;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::admission::Intake;
use crate::metrics::MqttMetrics;
use crate::outbound::{Charge, Lane, OutboundBudget, Outlet};
use crate::stall::StallDetector;
use crate::transport::{OutboundMessage, Outbox};

/// The broker's host (a name or an IP address, IPv6 without brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl std::fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl ntex_net::connect::Address for BrokerAddress {
    fn host(&self) -> &str {
        &self.host
    }

    fn port(&self) -> Option<u16> {
        Some(self.port)
    }
}

/// TLS to the broker.
#[derive(Debug, Clone)]
pub struct BrokerTls {
    /// The name the broker's certificate must be valid for (and the SNI).
    pub server_name: rustls::pki_types::ServerName<'static>,
    /// The client configuration, following its files.
    pub config: Arc<crate::tls::Reloading>,
    /// How often the files are checked for changes (`None`: never).
    pub reload_interval: Option<Duration>,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Broker host and port.
    pub broker: BrokerAddress,
    /// TLS, if the broker is reached over it.
    pub tls: Option<BrokerTls>,
    /// MQTT client id of this node (unique per node).
    pub client_id: String,
    /// Optional username.
    pub username: Option<String>,
    /// Optional password.
    pub password: Option<String>,
    /// Keep-alive interval.
    pub keep_alive: Duration,
    /// QoS 1 messages the broker may have in flight to us.
    pub receive_maximum: u16,
    /// Largest packet we accept.
    pub max_packet_size: u32,
    /// The broker must acknowledge a publish or (un)subscribe within this, or the connection
    /// is presumed dead, dropped and re-established.
    pub ack_timeout: Duration,
    /// First reconnect delay; doubles up to `reconnect_max`.
    pub reconnect_min: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// Bytes of publishes queued or awaiting their PUBACK (`limits.outbound_budget_mb`), half
    /// for small replies, half for the bulk lane.
    pub outbound_budget_bytes: usize,
    /// The bulk lane's pace (`limits.bulk_egress_mb_per_sec`,
    /// `limits.bulk_egress_messages_per_sec`).
    pub bulk_pace: crate::outbound::pacer::PaceLimits,
}

/// What the session tells the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// A notification to `client_id` was acked with "no matching subscribers".
    NoMatchingSubscribers {
        /// The client that is gone.
        client_id: String,
    },
    /// A message pushed to `device` was acked with "no matching subscribers": it is offline.
    DeviceOffline {
        /// The device id.
        device: String,
        /// The delivery's lock token.
        token: String,
    },
    /// A feedback batch was acked with "no matching subscribers".
    FeedbackUnheard {
        /// The delivery's lock token.
        token: String,
    },
}

/// Connection state as the service sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionState {
    /// Connected to the broker.
    pub connected: bool,
    /// The broker confirmed our request-topic subscription.
    pub request_subscription_active: bool,
}

enum Command {
    RequestSubscription(bool, Option<oneshot::Sender<()>>),
    Shutdown(oneshot::Sender<()>),
}

/// Handle to the session thread (cheap to clone).
#[derive(Clone)]
pub struct MqttHandle {
    commands: mpsc::Sender<Command>,
    outlet: Outlet,
    state: watch::Receiver<SessionState>,
}

/// Publishes queued per lane while the session is busy or reconnecting; beyond this callers
/// wait (the outbound budget bounds their bytes first).
const PUBLISH_QUEUE: usize = 16_384;
/// Subscription changes and shutdown queued.
const COMMAND_QUEUE: usize = 64;

impl MqttHandle {
    /// Starts the session thread (holding `exit` for the supervisor: it ends only after
    /// [`MqttHandle::shutdown`]). Requests are forwarded to `requests`.
    pub fn start(
        config: SessionConfig,
        requests: Intake,
        metrics: Arc<MqttMetrics>,
        stalls: Arc<StallDetector>,
        exit: crate::supervisor::ExitGuard,
    ) -> std::io::Result<(MqttHandle, SessionEventQueues)> {
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let budget = OutboundBudget::new(
            config.outbound_budget_bytes,
            &metrics.outbound_bytes,
            &metrics.outbound_waits_total,
        );
        let (outlet, lanes) = Outlet::new(budget, PUBLISH_QUEUE);
        let (state_tx, state) = watch::channel(SessionState::default());
        let (event_tx, events) = SessionEvents::new(
            SESSION_EVENT_QUEUE,
            metrics.session_events_dropped_total.clone(),
        );
        std::thread::Builder::new()
            .name("mqtt-session".into())
            .spawn(move || {
                let _exit = exit;
                ntex_rt::System::new("statestore-mqtt", ntex_net::DefaultRuntime).block_on(
                    session::run(
                        config,
                        session::Queues {
                            commands: command_rx,
                            lanes,
                        },
                        requests,
                        state_tx,
                        event_tx,
                        metrics,
                        stalls,
                    ),
                )
            })?;
        Ok((
            MqttHandle {
                commands,
                outlet,
                state,
            },
            events,
        ))
    }

    /// Connection state changes.
    pub fn state(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// Asks for (or drops) the request-topic subscription; resolves once the broker answered
    /// (or immediately if disconnected: the wish is kept and applied on reconnect).
    pub async fn set_request_subscription(&self, subscribed: bool) {
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(Command::RequestSubscription(subscribed, Some(done)))
            .await
            .is_ok()
        {
            let _ = wait.await;
        }
    }

    /// Unsubscribes, disconnects cleanly and stops the session thread.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Shutdown(done)).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
        }
    }
}

impl Outbox for MqttHandle {
    async fn publish(&self, message: OutboundMessage) -> bool {
        self.outlet.publish(message, None).await
    }

    async fn publish_charged(&self, message: OutboundMessage, prepaid: Option<Charge>) -> bool {
        self.outlet.publish(message, prepaid).await
    }

    fn try_charge(&self, lane: Lane, bytes: usize) -> Option<Charge> {
        self.outlet.budget().lane(lane).try_charge(bytes)
    }

    async fn charge(&self, lane: Lane, bytes: usize) -> Charge {
        self.outlet.budget().lane(lane).charge(bytes).await
    }
}
