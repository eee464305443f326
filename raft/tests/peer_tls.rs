//! Mutual TLS between peers, in one process over the real TCP peer network (loopback
//! listeners): a cluster whose nodes hold certificates of one CA elects a leader and
//! replicates; a node whose certificate comes from another CA gets nowhere, in either
//! direction, nor does one whose certificate of the cluster CA names no member, and every
//! refusal is counted in `statestore_raft_peer_tls_failures_total{side}`.
//!
//! Certificates are made with the `openssl` command (EC P-256, valid two days) by the test
//! harness's [`Pki`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
mod support;
use support::eventually;

use statestore_harness::pki::{CertFiles, Pki};
use statestore_raft::{DiscardEvents, MembershipChange, PeerTls, RaftConfig, RaftNode};
use statestore_storage::store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

struct Member {
    node: RaftNode,
    registry: Registry,
    addr: String,
    _dir: tempfile::TempDir,
}

/// Starts a node with `tls` on a loopback port, serving peers until `stop`. Its own address
/// is its one configured peer name (as the node crate configures its advertised address).
async fn start(id: u64, tls: &PeerTls, stop: &watch::Receiver<bool>) -> Member {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path().to_owned(), 16 << 20)).expect("store");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address").to_string();
    let config = RaftConfig {
        id,
        peer_tls: Some(tls.clone()),
        known_peers: vec![addr.clone()],
        ..RaftConfig::default()
    };
    let registry = Registry::new();
    let node = RaftNode::start(&config, store, Arc::new(DiscardEvents), &registry)
        .await
        .expect("start");
    {
        let node = node.clone();
        let stop = stop.clone();
        tokio::spawn(async move { node.serve_peers(listener, stop).await });
    }
    Member {
        node,
        registry,
        addr,
        _dir: dir,
    }
}

/// `statestore_raft_peer_tls_failures_total{side}` as read from `registry`.
fn tls_failures(registry: &Registry, side: &str) -> u64 {
    support::counter(
        registry,
        "statestore_raft_peer_tls_failures_total",
        "side",
        side,
    )
}

/// Polls `condition` (through the harness's `wait_for`) until it holds or `timeout` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_of_one_ca_replicate_and_a_foreign_certificate_is_refused_both_ways() {
    let pki = Pki::new();
    let dir = pki.dir();
    pki.ca("cluster-ca");
    pki.ca("rogue-ca");
    let CertFiles { cert, key } = pki.leaf("cluster-ca", "node", "IP:127.0.0.1");
    let CertFiles {
        cert: rogue_cert,
        key: rogue_key,
    } = pki.leaf("rogue-ca", "rogue", "IP:127.0.0.1");
    // The rogue trusts both CAs: whatever fails, fails because of its own certificate.
    let both = dir.join("both-ca.pem");
    let mut bundle = std::fs::read(dir.join("cluster-ca.pem")).expect("ca");
    bundle.extend(std::fs::read(dir.join("rogue-ca.pem")).expect("rogue ca"));
    std::fs::write(&both, bundle).expect("bundle");
    let tls = PeerTls::from_files(&dir.join("cluster-ca.pem"), &cert, &key).expect("peer TLS");
    let rogue_tls = PeerTls::from_files(&both, &rogue_cert, &rogue_key).expect("rogue TLS");

    let (stop, stopped) = watch::channel(false);
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start(id, &tls, &stopped).await);
    }
    let addrs: BTreeMap<u64, String> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u64 + 1, m.addr.clone()))
        .collect();
    for member in &members {
        member
            .node
            .bootstrap(addrs.clone())
            .await
            .expect("bootstrap");
    }

    // Elected and replicated over TLS: a leader whose followers hold its whole log.
    let replicated = eventually(Duration::from_secs(20), || {
        members.iter().any(|m| {
            let metrics = m.node.metrics();
            let last = metrics.last_log_index;
            m.node.leadership().borrow().is_leader
                && last.is_some()
                && metrics.replication.as_ref().is_some_and(|r| {
                    r.len() == 3 && r.values().all(|l| l.as_ref().map(|l| l.index) == last)
                })
        })
    })
    .await;
    assert!(
        replicated,
        "no leader with every follower caught up over TLS"
    );
    let leader = members
        .iter()
        .position(|m| m.node.leadership().borrow().is_leader)
        .expect("leader");
    let term = members[leader].node.leadership().borrow().term;
    for m in &members {
        assert_eq!(tls_failures(&m.registry, "server"), 0, "no refusals yet");
        assert_eq!(tls_failures(&m.registry, "client"), 0, "no refusals yet");
    }

    // A rogue node that thinks it belongs (it bootstraps with the cluster's members) campaigns:
    // its connections present a certificate of another CA and are refused by the servers.
    let rogue = start(4, &rogue_tls, &stopped).await;
    let mut rogue_members = addrs.clone();
    rogue_members.insert(4, rogue.addr.clone());
    rogue
        .node
        .bootstrap(rogue_members)
        .await
        .expect("rogue bootstrap");
    let refused = eventually(Duration::from_secs(20), || {
        members
            .iter()
            .map(|m| tls_failures(&m.registry, "server"))
            .sum::<u64>()
            >= 3
    })
    .await;
    assert!(refused, "the cluster's listeners did not refuse the rogue");
    assert_eq!(
        rogue.node.leadership().borrow().leader,
        None,
        "the rogue found no quorum"
    );
    let now = *members[leader].node.leadership().borrow();
    assert!(
        now.is_leader && now.term == term,
        "the cluster kept its leader and term: {now:?}"
    );

    // The leader adds a member whose listener presents a certificate of another CA: it refuses
    // to talk to it, and the member never receives an entry. openraft counts a learner within
    // its lag threshold of a short log as caught up, but the change is refused: the learner
    // never acknowledged anything, and it is taken out again.
    let outsider = start(5, &rogue_tls, &stopped).await;
    let outsider_addr = outsider.addr.clone();
    let before = tls_failures(&members[leader].registry, "client");
    let adding = {
        let node = members[leader].node.clone();
        tokio::spawn(async move {
            node.change_membership(&MembershipChange::AddVoter {
                id: 5,
                addr: outsider_addr,
            })
            .await
        })
    };
    let refused = eventually(Duration::from_secs(20), || {
        tls_failures(&members[leader].registry, "client") >= before + 2
    })
    .await;
    assert!(
        refused,
        "the leader did not refuse the outsider's certificate"
    );
    let matched = members[leader]
        .node
        .metrics()
        .replication
        .as_ref()
        .and_then(|r| r.get(&5).cloned())
        .flatten();
    assert_eq!(
        matched, None,
        "the leader replicated nothing to the outsider"
    );
    assert_eq!(
        outsider.node.metrics().last_log_index,
        None,
        "the outsider received no entry"
    );
    let added = tokio::time::timeout(Duration::from_secs(60), adding)
        .await
        .expect("the change ends")
        .expect("the change task");
    let err = added.expect_err("a node the leader cannot reach is not added");
    assert!(
        err.to_string().contains("acknowledged no replication"),
        "{err}"
    );
    let membership = members[leader]
        .node
        .metrics()
        .membership_config
        .membership()
        .clone();
    assert!(
        membership.get_node(&5).is_none(),
        "node 5 is neither voter nor learner: {membership:?}"
    );

    let _ = stop.send(true);
    for m in members.iter().chain([&rogue, &outsider]) {
        let _ = m.node.shutdown().await;
    }
}

/// Waits for a leader whose followers hold its whole log; returns its index in `members`.
async fn replicated_leader(members: &[Member]) -> usize {
    let replicated = eventually(Duration::from_secs(20), || {
        members.iter().any(|m| {
            let metrics = m.node.metrics();
            let last = metrics.last_log_index;
            m.node.leadership().borrow().is_leader
                && last.is_some()
                && metrics.replication.as_ref().is_some_and(|r| {
                    r.len() == members.len()
                        && r.values().all(|l| l.as_ref().map(|l| l.index) == last)
                })
        })
    })
    .await;
    assert!(replicated, "no leader with every follower caught up");
    members
        .iter()
        .position(|m| m.node.leadership().borrow().is_leader)
        .expect("leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_the_cluster_ca_that_names_no_member_is_refused() {
    let pki = Pki::new();
    let dir = pki.dir();
    pki.ca("cluster-ca");
    let CertFiles { cert, key } = pki.leaf("cluster-ca", "node", "IP:127.0.0.1");
    // Issued by the same CA for something else, e.g. a broker client.
    let CertFiles {
        cert: other_cert,
        key: other_key,
    } = pki.leaf("cluster-ca", "broker-client", "DNS:broker-client.test");
    let ca = dir.join("cluster-ca.pem");
    let tls = PeerTls::from_files(&ca, &cert, &key).expect("peer TLS");
    let other_tls = PeerTls::from_files(&ca, &other_cert, &other_key).expect("other TLS");

    let (stop, stopped) = watch::channel(false);
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start(id, &tls, &stopped).await);
    }
    let addrs: BTreeMap<u64, String> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (i as u64 + 1, m.addr.clone()))
        .collect();
    for member in &members {
        member
            .node
            .bootstrap(addrs.clone())
            .await
            .expect("bootstrap");
    }
    let leader = replicated_leader(&members).await;
    let term = members[leader].node.leadership().borrow().term;

    // It believes it is a member and campaigns: its chain is good, its name is no member's,
    // so every listener refuses the handshake.
    let intruder = start(4, &other_tls, &stopped).await;
    let mut intruder_members = addrs.clone();
    intruder_members.insert(4, intruder.addr.clone());
    intruder
        .node
        .bootstrap(intruder_members)
        .await
        .expect("intruder bootstrap");
    let refused = eventually(Duration::from_secs(20), || {
        members
            .iter()
            .all(|m| tls_failures(&m.registry, "server") >= 1)
    })
    .await;
    assert!(refused, "every member refused the intruder's certificate");
    assert_eq!(
        intruder.node.leadership().borrow().leader,
        None,
        "the intruder found no quorum"
    );
    let now = *members[leader].node.leadership().borrow();
    assert!(
        now.is_leader && now.term == term,
        "the cluster kept its leader and term: {now:?}"
    );
    for m in &members {
        assert_eq!(
            tls_failures(&m.registry, "client"),
            0,
            "the members refused nothing they dialled"
        );
    }

    let _ = stop.send(true);
    for m in members.iter().chain([&intruder]) {
        let _ = m.node.shutdown().await;
    }
}

#[test]
fn unreadable_or_mismatched_files_are_refused_naming_the_setting() {
    let pki = Pki::new();
    let dir = pki.dir();
    pki.ca("ca");
    let CertFiles { cert, key } = pki.leaf("ca", "node", "IP:127.0.0.1");
    let other_key = pki.leaf("ca", "other", "IP:127.0.0.1").key;
    let ca = dir.join("ca.pem");
    let missing = dir.join("missing.pem");

    let err = PeerTls::from_files(&missing, &cert, &key).expect_err("no CA file");
    assert!(err.to_string().contains("ca_file"), "{err}");
    let err = PeerTls::from_files(&ca, &missing, &key).expect_err("no cert file");
    assert!(err.to_string().contains("cert_file"), "{err}");
    let err = PeerTls::from_files(&ca, &cert, &ca).expect_err("a certificate as the key");
    assert!(err.to_string().contains("key_file"), "{err}");
    PeerTls::from_files(&ca, &cert, &other_key).expect_err("a key of another certificate");
    PeerTls::from_files(&ca, &cert, &key).expect("matching files");
}
