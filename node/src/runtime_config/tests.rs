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
    // The largest body, plus the longest key (64 KiB by default), plus 64 KiB of headroom.
    assert_eq!(session.max_packet_size, 262_144 + 65_536 + 65_536);
}
