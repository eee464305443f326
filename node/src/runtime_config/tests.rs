//! From a `Config` to the subsystems' settings: the session's largest packet. More under
//! `tests/`: the broker address and its TLS, and the security files and warnings.

use std::path::{Path, PathBuf};

use super::*;
use crate::config::{
    AdminConfig, ClusterConfig, DeviceboundConfig, HttpTlsConfig, LimitsConfig, ListenConfig,
    PeerTlsConfig,
};

mod mqtt_tls;
mod security;

#[test]
fn section_5_the_session_accepts_the_largest_send() {
    let config = Config {
        limits: LimitsConfig {
            max_value_bytes: 1_000,
            ..LimitsConfig::default()
        },
        devicebound: DeviceboundConfig {
            max_message_bytes: 262_144,
            ..DeviceboundConfig::default()
        },
        ..Config::default()
    };
    let session = config.session().expect("session settings");
    // The largest body, plus the longest key (60 KiB by default), plus 64 KiB of headroom.
    assert_eq!(session.max_packet_size, 262_144 + 61_440 + 65_536);
}

/// The table's defaults are the subsystems' own (which the table does not import).
#[test]
fn the_table_defaults_are_the_subsystems_defaults() {
    let config = Config::default();
    let limits = config.protocol_limits();
    let protocol = ProtocolLimits::default();
    assert_eq!(
        (
            limits.max_key_bytes,
            limits.max_value_bytes,
            limits.max_array_len,
            limits.max_px_ms
        ),
        (
            protocol.max_key_bytes,
            protocol.max_value_bytes,
            protocol.max_array_len,
            protocol.max_px_ms
        )
    );
    assert_eq!(
        config.devicebound_limits().max_message_bytes,
        DeviceboundLimits::DEFAULT_MAX_MESSAGE_BYTES
    );
    assert_eq!(
        config.mqtt.reply_topic_prefixes,
        crate::service::reply_topic::DEFAULT_REPLY_TOPIC_PREFIXES
    );
    let ttl = crate::config::table::SETTINGS
        .iter()
        .find(|row| row.path == "devicebound.default_ttl_ms")
        .map(|row| row.kind);
    assert_eq!(
        ttl,
        Some(crate::config::setting::Kind::between(
            60_000,
            i64::try_from(statestore_protocol::devicebound::request::MAX_TTL_MS).expect("fits")
        ))
    );
    let (raft, ours) = (statestore_raft::RaftConfig::default(), config.raft());
    assert_eq!(ours.heartbeat_interval, raft.heartbeat_interval);
    assert_eq!(ours.election_timeout_min, raft.election_timeout_min);
    assert_eq!(ours.election_timeout_max, raft.election_timeout_max);
    assert_eq!(ours.snapshot_after_proposals, raft.snapshot_after_proposals);
    assert_eq!(ours.snapshot_after_entries, raft.snapshot_after_entries);
    assert_eq!(
        ours.snapshot_after_state_percent,
        raft.snapshot_after_state_percent
    );
    assert_eq!(
        ours.entries_kept_after_snapshot,
        raft.entries_kept_after_snapshot
    );
    assert_eq!(
        ours.peer_timeouts.replication,
        raft.peer_timeouts.replication
    );
    assert_eq!(ours.log_cache_bytes, raft.log_cache_bytes);
}
