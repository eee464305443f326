//! The peer listener's settings: `cluster.max_snapshot_mb` (explicit, or derived from the
//! store's caps), the names a peer certificate may carry (configured peers and the advertised
//! address), and `--peer` with `--join` (trusted, not bootstrapped).

use super::*;

#[test]
fn the_snapshot_cap_is_explicit_or_derived_from_what_the_store_holds() {
    let defaults = Config::default();
    assert_eq!(defaults.cluster.max_snapshot_mb, None);
    // 1 GiB of keys and values, 256 MiB of replies, 1,000,000 messages of 64 KiB; twice.
    let held: u64 = (1 << 30) + (256 << 20) + 1_000_000 * 65_536;
    assert_eq!(defaults.max_snapshot_bytes(), 2 * held);
    assert_eq!(defaults.raft().inbound.max_snapshot_bytes, 2 * held);

    let mut small = Config::default();
    small.limits.max_bytes = 1 << 20;
    small.limits.max_remembered_reply_bytes = 1 << 20;
    small.devicebound.max_messages = 10;
    assert_eq!(small.max_snapshot_bytes(), 4 << 30, "never below 4 GiB");

    let explicit: Config =
        Config::from_toml_str("[cluster]\nmax_snapshot_mb = 512\n").expect("parses");
    explicit.validate().expect("valid");
    assert_eq!(explicit.max_snapshot_bytes(), 512 << 20);
    assert_eq!(explicit.raft().inbound.max_snapshot_bytes, 512 << 20);

    // The largest `cluster.max_snapshot_mb`: 16 TiB.
    const MAX_SNAPSHOT_MB: u64 = 16 << 20;
    for mb in [0, MAX_SNAPSHOT_MB + 1] {
        let mut bad = Config::default();
        bad.cluster.max_snapshot_mb = Some(mb);
        let err = bad.validate().expect_err("out of range").to_string();
        assert!(err.contains("cluster.max_snapshot_mb"), "{err}");
    }
}

#[test]
fn peer_certificates_may_name_the_configured_peers_and_this_node() {
    let config: Config = Config::from_toml_str(
        r#"
        id = 2
        [cluster]
        advertise = "node-2.example:7481"
        [cluster.peers]
        1 = "node-1.example:7481"
        2 = "node-2.example:7481"
        3 = "10.0.0.3:7481"
        "#,
    )
    .expect("parses");
    let mut known = config.raft().known_peers;
    known.sort();
    known.dedup();
    assert_eq!(
        known,
        [
            "10.0.0.3:7481",
            "node-1.example:7481",
            "node-2.example:7481"
        ]
    );
    assert_eq!(
        Config::default().raft().known_peers,
        ["127.0.0.1:7481"],
        "alone: its own address"
    );
}

#[test]
fn a_joining_node_may_name_the_members_it_trusts() {
    let mut joining = Config {
        id: 4,
        ..Config::default()
    };
    joining.cluster.join = true;
    joining.cluster.peers = BTreeMap::from([
        ("1".into(), "host1:7481".into()),
        ("2".into(), "host2:7481".into()),
    ]);
    joining
        .validate()
        .expect("--join with --peer: the members, without this node");
    assert!(
        joining
            .raft()
            .known_peers
            .contains(&"host1:7481".to_owned())
    );
    joining
        .cluster
        .peers
        .insert("x".into(), "host3:7481".into());
    let err = joining.validate().expect_err("a bad id").to_string();
    assert!(err.contains("peer id \"x\""), "{err}");

    // Bootstrapping, the list must still include this node.
    let mut bootstrapping = joining.clone();
    bootstrapping.cluster.join = false;
    bootstrapping.cluster.peers.remove("x");
    let err = bootstrapping
        .validate()
        .expect_err("without this node")
        .to_string();
    assert!(err.contains("peers must include this node"), "{err}");
}
