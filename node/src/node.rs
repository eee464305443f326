//! Assembly of a running node: storage → Raft → MQTT session → service, leader duties and
//! HTTP; then graceful shutdown on SIGTERM/SIGINT (release the request subscription, finish
//! in-flight requests, stop Raft, flush).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::serve::{Listener, ListenerExt};
use statestore_policy::Policy;
use statestore_raft::RaftNode;
use statestore_storage::keyspace::read;
use statestore_storage::store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::admin_token::AdminAuth;
use crate::admission::Intake;
use crate::authz::{Authorizer, policy_file};
use crate::config::{Config, IdentitySource};
use crate::error::NodeError;
use crate::http::{self, HttpState};
use crate::https::TlsListener;
use crate::metrics::{NodeMetrics, raise_to, set_gauge};
use crate::mqtt::{MqttHandle, watch_tls_files};
use crate::service::device_push::DevicePush;
use crate::service::device_sweep;
use crate::service::notify::{self, NotifySink};
use crate::service::notify_queue::{self, QueueBounds, QueueGauges};
use crate::service::offline_devices::OfflineDevices;
use crate::service::{Devicebound, Service, StateStore, expiry, leader};
use crate::stall::StallDetector;
use crate::supervisor::{FAILPOINT_ENV, Supervisor, Task};
use crate::transport::{Admitted, DEVICE_TOPIC_PREFIX, DEVICEBOUND_REQUEST_TOPIC};
use crate::verdict::{NoReply, Unavailable};

/// Admitted requests queued between the MQTT session and the dispatcher (the request budget
/// bounds them; this only sizes the channel).
const REQUEST_QUEUE: usize = 4_096;

/// How long shutdown waits for the node's tasks to end before aborting the rest.
const TASKS_JOIN_DEADLINE: Duration = Duration::from_secs(2);

/// How long a task's failure waits for a Raft fatal error that may have caused it.
const RAFT_FATAL_GRACE: Duration = Duration::from_millis(500);

/// The policy in force at start (`auth.policy_file`; an unusable file stops the node) and the
/// follower of its file. Warns when nothing is enforced, and when rules match identities any
/// client can claim.
fn start_authorization(
    config: &Config,
    metrics: &NodeMetrics,
) -> Result<(Arc<Authorizer>, Option<policy_file::Follower>), NodeError> {
    let (policy, follower) = match &config.auth.policy_file {
        Some(path) => {
            let (policy, bytes) = policy_file::load(path)?;
            (
                policy,
                Some(policy_file::Follower::new(path.clone(), bytes)),
            )
        }
        None => (Policy::open(), None),
    };
    let path = config
        .auth
        .policy_file
        .as_ref()
        .map(|p| p.display().to_string());
    if policy.is_open() {
        tracing::warn!(policy_file = ?path, "no authorization rules: every requester may read, write and watch every key and use every device queue (set auth.policy_file)");
    } else {
        tracing::info!(policy_file = ?path, rules = policy.rule_count(), identity = ?config.auth.identity, "authorization rules in force");
        if config.auth.identity == IdentitySource::Claimed {
            tracing::warn!(
                "auth.identity = \"claimed\": the rules match identities that clients claim (__srcId) and can forge; use auth.identity = \"broker\" with the statestore broker plugin"
            );
        }
    }
    let authorizer = Arc::new(Authorizer::new(policy, metrics.authz.clone()));
    Ok((authorizer, follower))
}

/// Runs a node until SIGTERM or SIGINT, or until Raft or one of the node's tasks fails.
pub async fn run(config: Config) -> Result<(), NodeError> {
    // First: unusable TLS files (or a password file) stop the node before it opens anything.
    let session = config.session()?;
    match crate::huge_pages::disable() {
        Ok(true) => tracing::info!("transparent huge pages turned off for this process"),
        Ok(false) => {}
        Err(err) => {
            tracing::warn!(error = %err, "cannot turn transparent huge pages off; the allocator's page faults will cost more CPU")
        }
    }
    let metrics = Arc::new(NodeMetrics::new()?);
    let mut supervisor = Supervisor::new(
        &metrics.registry,
        std::env::var(FAILPOINT_ENV).ok().as_deref(),
    )?;
    let store = Store::open(&StoreConfig::new(
        config.data_dir.clone(),
        config.storage.cache_capacity_mb.saturating_mul(1 << 20),
    ))?;
    tracing::info!(id = config.id, name = %config.node_name(), data_dir = %config.data_dir.display(), "storage opened");

    let serving = Arc::new(AtomicBool::new(false));
    // Key events queued for the notifier; beyond its bounds they are dropped (and counted).
    let (event_tx, event_rx) = notify_queue::channel(
        QueueBounds::default(),
        QueueGauges {
            pending: metrics.store.notify_pending.clone(),
            pending_bytes: metrics.store.notify_pending_bytes.clone(),
        },
    );
    let sink = Arc::new(NotifySink::new(event_tx, serving.clone(), metrics.clone()));
    let mut raft_config = config.raft();
    raft_config.peer_tls = config.peer_tls()?;
    let http_tls = config.http_tls()?;
    if let Some(tls) = &config.cluster.tls {
        metrics.record_cert_expiry("peer", &tls.cert_file);
    }
    if let Some(tls) = &config.admin.tls {
        metrics.record_cert_expiry("http", &tls.cert_file);
    }
    let admin_auth = AdminAuth::new(config.admin_token()?, &metrics.registry)?;
    let (authorizer, policy_follower) = start_authorization(&config, &metrics)?;
    for warning in config.exposure_warnings() {
        tracing::warn!("{warning}");
    }
    let raft = RaftNode::start(&raft_config, store.clone(), sink, &metrics.registry).await?;

    let raft_listener = TcpListener::bind(config.listen.raft).await?;
    let http_listener = TcpListener::bind(config.listen.http).await?;
    let (stop_tx, stop) = watch::channel(false);
    {
        let raft = raft.clone();
        let stop = stop.clone();
        supervisor.spawn(Task::RaftPeers, async move {
            raft.serve_peers(raft_listener, stop).await;
        });
    }
    if config.cluster.join {
        tracing::info!(advertise = %config.advertise_addr(), "waiting to be added to a cluster (statestore cluster add-node)");
    } else if raft.bootstrap(config.initial_members()?).await? {
        tracing::info!(members = ?config.initial_members()?, "initialised a new cluster");
    }

    let (request_tx, mut request_rx) = mpsc::channel(REQUEST_QUEUE);
    let intake = Intake::new(
        request_tx,
        config.request_budget_bytes(),
        metrics.service.request_budget_used_bytes.clone(),
        metrics
            .service
            .requests_dropped_total
            .with_label_values(&[Unavailable::Overloaded.label()]),
        metrics
            .service
            .requests_dropped_total
            .with_label_values(&[NoReply::TooManyProperties.label()]),
    );
    let stalls = StallDetector::start(
        metrics.service.stalls_total.clone(),
        supervisor.exit_guard(Task::StallDetector),
    )?;
    if let (Some(follower), Some(interval)) = (policy_follower, config.policy_reload_interval()) {
        supervisor.spawn(
            Task::PolicyWatch,
            policy_file::follow(follower, authorizer.clone(), interval, stop.clone()),
        );
    }
    if let Some(tls) = &session.tls {
        supervisor.spawn(
            Task::MqttTlsWatch,
            watch_tls_files(tls.clone(), metrics.mqtt.clone(), stop.clone()),
        );
    }
    let (mqtt, session_events) = MqttHandle::start(
        session,
        intake,
        metrics.mqtt.clone(),
        stalls,
        supervisor.exit_guard(Task::MqttSession),
    )?;
    let offline_devices = Arc::new(OfflineDevices::new(
        metrics.devicebound.devices_in_backoff.clone(),
    ));
    let service = Arc::new(
        Service::new(
            raft.clone(),
            &config.node_name(),
            mqtt.clone(),
            config.service(),
            metrics.clone(),
            serving.clone(),
            offline_devices.clone(),
        )
        .with_authorizer(authorizer.clone()),
    );

    let http_state = Arc::new(HttpState {
        metrics: metrics.clone(),
        raft: raft.clone(),
        mqtt: mqtt.state(),
        serving: serving.clone(),
        name: config.node_name(),
        admin_auth,
        digest_gate: http::DigestGate::default(),
    });
    let router = http::router(http_state);
    match http_tls {
        Some(tls) => {
            let listener = TlsListener::new(http_listener, tls)?;
            supervisor.spawn(Task::Http, serve(listener, router, stop.clone(), "https"));
        }
        None => {
            let listener = http_listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            supervisor.spawn(Task::Http, serve(listener, router, stop.clone(), "http"));
        }
    }
    supervisor.spawn(
        Task::Leader,
        leader::run(
            service.clone(),
            mqtt.clone(),
            serving.clone(),
            config.quota(),
            config.devicebound_settings(),
            config.leader_timing(),
            stop.clone(),
        ),
    );
    supervisor.spawn(
        Task::Expiry,
        expiry::run(
            service.clone(),
            Duration::from_millis(config.expiry.sweep_interval_ms),
            config.expiry.batch_size,
            stop.clone(),
        ),
    );
    supervisor.spawn(
        Task::Notifier,
        until_stopped(
            stop.clone(),
            notify::run_notifier(
                event_rx,
                raft.view(),
                Arc::new(mqtt.clone()),
                metrics.clone(),
            ),
        ),
    );
    let push = DevicePush::new(service.clone(), offline_devices, Some(mqtt.state()));
    supervisor.spawn(
        Task::Forgetter,
        notify::run_forgetter(session_events.forget, service.clone(), stop.clone()),
    );
    supervisor.spawn(
        Task::DeviceEvents,
        push.clone().run_events(session_events.device, stop.clone()),
    );
    supervisor.spawn(Task::DevicePush, push.clone().run(stop.clone()));
    supervisor.spawn(
        Task::DeviceSweep,
        device_sweep::run(push.clone(), stop.clone()),
    );
    supervisor.spawn(
        Task::Gauges,
        sample_gauges(raft.clone(), store.clone(), metrics.clone(), stop.clone()),
    );
    {
        let service = service.clone();
        let push = push.clone();
        // Ends when the session's intake is gone (after `mqtt.shutdown`): what was admitted
        // before is still handled, as the shutdown's grace period promises.
        supervisor.spawn(Task::Dispatcher, async move {
            while let Some(Admitted { message, admission }) = request_rx.recv().await {
                // Boxed: the request future is large, and tokio would otherwise copy it by
                // value several times on its way into the task (2 % of the leader's CPU).
                let handled: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
                    if message.topic == DEVICEBOUND_REQUEST_TOPIC {
                        Box::pin(service.clone().handle::<Devicebound>(message))
                    } else if message.topic.starts_with(DEVICE_TOPIC_PREFIX) {
                        Box::pin(push.clone().handle_inbound(message))
                    } else {
                        Box::pin(service.clone().handle::<StateStore>(message))
                    };
                tokio::spawn(async move {
                    handled.await;
                    drop(admission);
                });
            }
        });
    }
    tracing::info!(
        http = %config.listen.http,
        raft = %config.listen.raft,
        broker = %config.mqtt.broker,
        peer_tls = config.cluster.tls.is_some(),
        https = config.admin.tls.is_some(),
        admin_token = config.admin.token_file.is_some(),
        "statestore node started"
    );

    let fatal = tokio::select! {
        biased;
        reason = raft.fatal() => Some(raft_fatal(reason)),
        failure = supervisor.failure() => {
            // A task may end because Raft stopped (the notifier's queue closes with it): then
            // Raft's reason is the one to report, and its path (no final flush) the one to take.
            match tokio::time::timeout(RAFT_FATAL_GRACE, raft.fatal()).await {
                Ok(reason) => Some(raft_fatal(reason)),
                Err(_) => {
                    tracing::error!(%failure, "a task of the node stopped while it was running; the node exits (non-zero) so its supervisor restarts it");
                    Some(NodeError::TaskFailed(failure))
                }
            }
        }
        () = wait_for_signal() => None,
    };
    tracing::info!("shutting down: releasing the request subscription");
    let _ = stop_tx.send(true);
    serving.store(false, std::sync::atomic::Ordering::SeqCst);
    service.close();
    if tokio::time::timeout(Duration::from_secs(5), mqtt.set_request_subscription(false))
        .await
        .is_err()
    {
        tracing::warn!("broker did not confirm the unsubscribe in time");
    }
    let remaining = service
        .in_flight()
        .wait_drained(Duration::from_millis(config.shutdown_grace_ms))
        .await;
    if remaining > 0 {
        tracing::warn!(
            remaining,
            "shutdown grace period over with requests still in flight"
        );
    }
    mqtt.shutdown().await;
    let aborted = supervisor.join(TASKS_JOIN_DEADLINE).await;
    if !aborted.is_empty() {
        tracing::warn!(?aborted, "tasks did not stop in time and were aborted");
    }
    match tokio::time::timeout(Duration::from_secs(5), raft.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "raft shutdown"),
        Err(_) => tracing::warn!("raft did not stop in time"),
    }
    if let Some(error) = fatal {
        // No final flush and no clean-stop marker: a disk that failed is not trusted (a flush
        // to a full one retries for ever); the restart reads the state database back before
        // it keeps it, and applies Raft's log after it.
        return Err(error);
    }
    // The final sync, then the clean-stop marker: the next start uses the state database as it
    // is. Every other way out (a fatal error above, a crash, a kill) leaves no marker, and the
    // next start reads the state database back before it keeps it (see the storage crate's
    // `recovery`).
    let closing = store.clone();
    tokio::task::spawn_blocking(move || closing.close_clean())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    tracing::info!("stopped");
    Ok(())
}

async fn serve<L>(
    listener: L,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
    name: &'static str,
) where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    let shutdown = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    if let Err(err) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(listener = name, error = %err, "listener failed");
    }
}

/// Logs Raft's fatal error and makes it the node's.
fn raft_fatal(reason: statestore_raft::StopCause) -> NodeError {
    tracing::error!(%reason, "raft stopped on a fatal error; the node exits (non-zero) so its supervisor restarts it");
    NodeError::RaftFatal(reason)
}

/// Runs `future` until it ends or the node stops (for tasks that do not watch `stop`).
async fn until_stopped(mut stop: watch::Receiver<bool>, future: impl Future<Output = ()>) {
    tokio::select! {
        () = future => {}
        _ = stop.wait_for(|stopped| *stopped) => {}
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// Refreshes gauges that are cheaper to sample than to track: key count, bytes, quota use,
/// database size on disk.
async fn sample_gauges(
    raft: RaftNode,
    store: Store,
    metrics: Arc<NodeMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        let gauges = &metrics.store;
        if let Ok(meta) = read::meta(&raft.view()) {
            gauges.record_keyspace(&meta);
        }
        let sized = store.clone();
        if let Ok(Ok(size)) = tokio::task::spawn_blocking(move || sized.size_on_disk()).await {
            set_gauge(&gauges.db_size_bytes, size);
        }
        set_gauge(&gauges.log_size_bytes, raft.log_size_on_disk());
        // The index lock may wait for an apply in progress: not on a Tokio worker.
        let viewed = raft.view();
        let devicebound = metrics.devicebound.clone();
        let _sampled = tokio::task::spawn_blocking(move || {
            devicebound.record_index(&viewed.device_index());
        })
        .await;
        if let Ok(state) = store.state() {
            set_gauge(&gauges.memtable_bytes, state.memtable_bytes());
            let (replies, reply_bytes) = state.resident_size();
            set_gauge(&gauges.remembered_replies, replies);
            set_gauge(&gauges.reply_memory_bytes, reply_bytes);
            set_gauge(&gauges.reply_log_bytes, state.reply_log_bytes());
            raise_to(&gauges.memtable_stalls_total, state.memtable_stalls());
            set_gauge(&gauges.snapshot_preimage_bytes, state.preimage_bytes());
            raise_to(
                &gauges.snapshot_preimage_waits_total,
                state.preimage_waits(),
            );
            set_gauge(&gauges.db_level0_tables, state.level0_tables());
            raise_to(&gauges.compaction_waits_total, state.compaction_waits());
        }
        let (files, bytes) = statestore_storage::gradual_remove::pending();
        set_gauge(&gauges.files_being_freed, files);
        set_gauge(&gauges.bytes_being_freed, bytes);
    }
}
