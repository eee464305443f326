//! The state store endpoint (protocol §2, §5): a parsed [`Command`] checked at the door
//! (timestamps, fencing tokens, KEYNOTIFY's client id) becomes a linearizable read (GET, SCAN
//! page) or a typed [`Mutation`] proposed through Raft, answered from what apply decided.
//! Runs as stage 4 of the [`pipeline`](super::pipeline).

use std::sync::Arc;

use statestore_policy::{Grants, KeyAccess};
use statestore_protocol::{Command, CommandVerb, ErrorReply, ProtocolError, Reply};
use statestore_storage::keyspace::read;
use statestore_storage::machine::Mutation;
use statestore_storage::machine::read as machine_read;
use statestore_vocab::hlc::{Hlc, MAX_CLOCK_DRIFT_MS};
use tokio::time::Instant;

use super::envelope::Envelope;
use super::pipeline::{Endpoint, Execution};
use super::reply_room::{self, ReplyRoom};
use super::request_digest::{self, EffectProperties};
use super::{GaugeGuard, MAX_CLIENT_ID_BYTES, Service, ServiceConfig, answer, notify};
use crate::error::NodeError;
use crate::metrics::NodeMetrics;
use crate::transport::{InboundMessage, Outbox};
use crate::verdict::{Answer, Unavailable};

/// The state store protocol on `statestore/v1/.../command/invoke`.
pub struct StateStore;

impl Endpoint for StateStore {
    const NAME: &'static str = "statestore";
    type Request<'a> = Command<'a>;
    type Verb = CommandVerb;

    fn parse<'a>(config: &ServiceConfig, payload: &'a [u8]) -> Result<Command<'a>, ProtocolError> {
        statestore_protocol::parse_command(payload, &config.protocol)
    }

    fn verb(command: &Command<'_>) -> CommandVerb {
        command.verb()
    }

    fn sniff(payload: &[u8]) -> CommandVerb {
        statestore_protocol::sniff_verb(payload)
    }

    fn verb_label(verb: CommandVerb) -> &'static str {
        verb.label()
    }

    /// AIO's methods: GET and KEYNOTIFY (also STOP) read their key, SET, DEL and VDEL write it;
    /// SCAN is allowed and lists only the keys the requester may read.
    fn authorize(grants: &Grants, command: &Command<'_>) -> bool {
        match command {
            Command::Get { key } | Command::KeyNotify { key, .. } => {
                grants.allows_key(KeyAccess::Read, key)
            }
            Command::Set { key, .. } | Command::Del { key } | Command::VDel { key, .. } => {
                grants.allows_key(KeyAccess::Write, key)
            }
            Command::Scan { .. } => true,
        }
    }

    fn execute<'a: 'f, 'f, O: Outbox>(
        service: &'f Arc<Service<O>>,
        command: Command<'a>,
        message: &'f InboundMessage,
        envelope: &'f Envelope,
        grants: &'f Arc<Grants>,
        room: &'f mut ReplyRoom,
    ) -> Execution<'f> {
        Box::pin(service.execute_command(command, message, envelope, grants, room))
    }

    fn observe(metrics: &NodeMetrics, verb: CommandVerb, result: &'static str, seconds: f64) {
        metrics.service.observe(verb, result, seconds);
    }
}

impl<O: Outbox> Service<O> {
    /// Validates the request's timestamps and runs the command; a read takes `room` for its
    /// reply before it is built.
    async fn execute_command(
        &self,
        command: Command<'_>,
        message: &InboundMessage,
        envelope: &Envelope,
        grants: &Arc<Grants>,
        room: &mut ReplyRoom,
    ) -> Result<Answer, Unavailable> {
        let prepared =
            tracing::debug_span!("validate").in_scope(|| self.prepare(command, message, envelope));
        let (mutation, request_ts) = match prepared {
            Err(refused) => return Ok(Answer::error(refused)),
            Ok(Prepared::Read { key }) => return self.read_in_room(room, || self.get(key)).await,
            Ok(Prepared::Scan { pattern, after }) => {
                return self
                    .read_in_room(room, || self.scan(pattern.clone(), after, grants.clone()))
                    .await;
            }
            Ok(Prepared::Write {
                mutation,
                request_ts,
            }) => (mutation, request_ts),
        };
        let digest = request_digest::request_digest(message, EffectProperties::StateStore);
        let request = self.request_id(envelope, message.message_expiry_secs, digest);
        if let Some(outcome) =
            machine_read::remembered_reply(&self.raft.view(), &request, self.wall.now_ms())?
        {
            self.metrics.service.dedup_hits_total.inc();
            return Ok(answer::from_outcome(outcome));
        }
        let outcome = self
            .propose(Some(request), mutation, request_ts.as_ref())
            .await?;
        Ok(answer::from_outcome(outcome))
    }

    /// The checks at the door (§5): timestamps, fencing tokens, the client id of KEYNOTIFY; a
    /// read, a typed mutation, or the error reply.
    fn prepare<'a>(
        &self,
        command: Command<'a>,
        message: &InboundMessage,
        envelope: &Envelope,
    ) -> Result<Prepared<'a>, ErrorReply> {
        let request_ts = match message.user_property("__ts").map(Hlc::parse) {
            None => None,
            Some(Ok(ts)) => Some(ts),
            Some(Err(_)) => return Err(ErrorReply::MalformedTimestamp),
        };
        if matches!(command, Command::Set { .. }) && request_ts.is_none() {
            return Err(ErrorReply::MissingTimestamp);
        }
        let fenced = matches!(
            command,
            Command::Set { .. } | Command::Del { .. } | Command::VDel { .. }
        );
        let fencing_token = match message
            .user_property("__ft")
            .filter(|_| fenced)
            .map(Hlc::parse)
        {
            None => None,
            Some(Ok(ft)) => Some(ft),
            Some(Err(_)) => return Err(ErrorReply::MalformedTimestamp),
        };
        let limit = self.wall.now_ms().saturating_add(MAX_CLOCK_DRIFT_MS);
        if request_ts.as_ref().is_some_and(|ts| ts.ms > limit) {
            return Err(ErrorReply::TimestampSkew);
        }
        if fencing_token.as_ref().is_some_and(|ft| ft.ms > limit) {
            return Err(ErrorReply::FencingTokenSkew);
        }

        let mutation = match command {
            Command::Get { key } => return Ok(Prepared::Read { key }),
            Command::Scan { pattern, after } => return Ok(Prepared::Scan { pattern, after }),
            Command::Set {
                key,
                value,
                condition,
                expire_after_ms,
            } => Mutation::Set {
                key: key.to_vec(),
                value: value.to_vec(),
                condition,
                expire_after_ms,
                fencing_token,
            },
            Command::Del { key } => Mutation::Del {
                key: key.to_vec(),
                fencing_token,
            },
            Command::VDel { key, value } => Mutation::VDel {
                key: key.to_vec(),
                value: value.to_vec(),
                fencing_token,
            },
            Command::KeyNotify { key, stop } => {
                // The client id becomes part of a topic (hex-encoded): keep it well inside MQTT's
                // 64 KiB topic limit.
                let Some(client) = envelope
                    .client_id
                    .clone()
                    .filter(|c| c.len() <= MAX_CLIENT_ID_BYTES)
                else {
                    return Err(ErrorReply::Syntax);
                };
                if !stop && !notify::notify_topic_fits(&client, key) {
                    // Its notifications could not be published: refused like an over-long key.
                    return Err(ErrorReply::Syntax);
                }
                if stop {
                    Mutation::Unobserve {
                        client,
                        key: key.to_vec(),
                    }
                } else {
                    Mutation::Observe {
                        client,
                        key: key.to_vec(),
                    }
                }
            }
        };
        Ok(Prepared::Write {
            mutation,
            request_ts,
        })
    }

    /// A read (GET, SCAN) with room for its reply in the outbound budget ([`reply_room`]):
    /// what it read when the replies lane has no room for it is let go, and read again
    /// (linearizably, later) once there is.
    async fn read_in_room<F, Fut>(
        &self,
        room: &mut ReplyRoom,
        read: F,
    ) -> Result<Answer, Unavailable>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Answer, Unavailable>>,
    {
        loop {
            let answer = read().await?;
            let version_bytes = answer.version().map(|v| v.to_string().len());
            let payload_bytes = match &answer {
                Answer::Reply { reply, .. } => reply_room::payload_bytes(reply),
                Answer::Encoded(payload) => payload.len(),
            };
            let bytes = room.reply_bytes(payload_bytes, version_bytes);
            if room.fits(&self.outbox, bytes) {
                return Ok(answer);
            }
            drop(answer);
            room.wait(&self.outbox, bytes).await;
        }
    }

    /// GET: a linearizable read at the leader's time (expired keys are invisible, §8).
    #[tracing::instrument(level = "debug", name = "read", skip_all)]
    async fn get(&self, key: &[u8]) -> Result<Answer, Unavailable> {
        self.raft.ensure_linearizable().await?;
        let view = self.raft.view();
        let time = self.read_time(&view)?;
        Ok(match read::live_record(&view, key, time)? {
            Some(record) => Answer::Reply {
                reply: Reply::Bulk(record.value),
                version: Some(record.version),
            },
            None => Reply::Nil.into(),
        })
    }

    /// SCAN: one page of the live keys matching `pattern` after `after` that `grants` allow the
    /// requester to read (the others are examined and skipped, as if expired), read
    /// linearizably like GET; the page's work is bounded by [`statestore_protocol::scan::PageLimits`], its time by their
    /// `max_duration`. The page is built off the runtime, on the blocking pool, in one of
    /// [`SCAN_SLOTS`] slots; a SCAN without a free slot waits for one (its request deadline
    /// still applies). The slot is held until the page is built, also when the request gave up
    /// meanwhile, so the slots bound the threads SCANs occupy.
    #[tracing::instrument(level = "debug", name = "read", skip_all)]
    async fn scan(
        &self,
        pattern: statestore_protocol::glob::Glob,
        after: Option<&[u8]>,
        grants: Arc<Grants>,
    ) -> Result<Answer, Unavailable> {
        let slot = {
            let _waiting = GaugeGuard::new(&self.metrics.service.scan_pages_waiting);
            self.scan_slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_closed| Unavailable::Internal(NodeError::ScanSlotsClosed))?
        };
        self.raft.ensure_linearizable().await?;
        let view = self.raft.view();
        let time = self.read_time(&view)?;
        let after = after.map(<[u8]>::to_vec);
        let limits = self.config.scan_page;
        let metrics = self.metrics.clone();
        let built = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let service = &metrics.service;
            let _in_flight = GaugeGuard::new(&service.scan_pages_in_flight);
            let started = Instant::now();
            let deadline = started + limits.max_duration;
            let stored = read::keys_after(&view, after.as_deref(), time).map(|entry| {
                entry.map(
                    |(key, live, stored_bytes)| statestore_protocol::scan::StoredKey {
                        live: live && grants.allows_key(KeyAccess::Read, &key),
                        key,
                        stored_bytes,
                    },
                )
            });
            let built = statestore_protocol::scan::page_until(&pattern, stored, &limits, || {
                Instant::now() >= deadline
            });
            service
                .scan_page_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            if let Ok((_, end)) = &built {
                service
                    .scan_pages_total
                    .with_label_values(&[end.label()])
                    .inc();
            }
            built
        })
        .await
        .map_err(|failed| Unavailable::Internal(NodeError::BlockingTask(failed)))?;
        let (page, _end) = built?;
        Ok(Reply::Keys(page).into())
    }
}

/// What a request becomes once checked at the door (a short-lived stack value: the size of
/// the write variant costs nothing).
#[allow(clippy::large_enum_variant)]
enum Prepared<'a> {
    /// A linearizable GET of `key`.
    Read { key: &'a [u8] },
    /// A linearizable SCAN page.
    Scan {
        pattern: statestore_protocol::glob::Glob,
        after: Option<&'a [u8]>,
    },
    /// A typed mutation to propose, with the request's `__ts`.
    Write {
        mutation: Mutation,
        request_ts: Option<Hlc>,
    },
}
