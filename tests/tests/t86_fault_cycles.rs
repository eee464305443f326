//! The fault-injection cycle: three node processes, each in its own network namespace with
//! its data on its own small tmpfs, one Mosquitto, four SDK writers and a history recorder
//! running throughout, while a seeded sequence of faults hits the cluster: `kill -9` of the
//! leader or a follower, SIGSTOP of the leader beyond the election timeout, the leader's Raft
//! links cut (both ways or one way), a follower cut off, flapping links, a full-cluster
//! `kill -9` and restart, slow fsyncs on the leader (strace delays every fsync/fdatasync by
//! 300 ms), the leader's disk full (it must exit non-zero rather than serve; restarted once
//! space is back), a node restarted with its wall clock 25 s ahead or behind (libfaketime;
//! the skew stays until a later skew fault resets it), the leader's broker link cut, and a
//! broker restart. After each fault the cluster is healed
//! and a fresh client's write must be acknowledged. At the end: every acknowledged write is
//! there, the replicas agree, most recorded operations got a reply, the recorded history is
//! linearizable, and the versions of applied writes (the fencing tokens clients use) increase
//! along real time and stay within 60 s of the wall clock
//! ([`statestore_tests::version_audit`]).
//!
//! The leader cut off from the broker (its peers still reachable) must hand leadership over; a
//! broker restart is a SIGTERM (Mosquitto saves its sessions) and a start on the same port,
//! which the SDK clients and the nodes resume. A broker that forgets its sessions (SIGKILL)
//! is not among the faults: the official SDK ends a session the broker forgot, so every
//! client would stop for good (`t70_lifecycle` covers the node's side of that).
//!
//! CI runs a short profile (`STATESTORE_FAULT_CYCLES`, default: each fault once). The long
//! profile is
//! `STATESTORE_FAULT_CYCLES=200 cargo test -p statestore-tests --test t86_fault_cycles --
//! --nocapture` (root: network namespaces); `STATESTORE_FAULT_SEED` picks another sequence.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use statestore_tests::cluster::Cluster;
use statestore_tests::history::{Recorder, RecorderConfig, check_recorded};
use statestore_tests::netlab::{Faults, NetLab};
use statestore_tests::process_faults::{DiskFill, SlowFsync, skewed_clock_env};
use statestore_tests::sdk::SdkClient;
use statestore_tests::workload::{
    finish_writers, set_until_acknowledged, start_writers, verify_acked,
};

/// The faults one cycle can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeader,
    KillFollower,
    PauseLeader,
    PartitionLeader,
    PartitionLeaderInbound,
    PartitionFollower,
    FlapLeader,
    RestartAll,
    SlowFsyncLeader,
    DiskFullLeader,
    SkewClock,
    BrokerCutLeader,
    BrokerRestart,
}

const FAULTS: [Fault; 13] = [
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::PauseLeader,
    Fault::PartitionLeader,
    Fault::PartitionLeaderInbound,
    Fault::PartitionFollower,
    Fault::FlapLeader,
    Fault::RestartAll,
    Fault::SlowFsyncLeader,
    Fault::DiskFullLeader,
    Fault::SkewClock,
    Fault::BrokerCutLeader,
    Fault::BrokerRestart,
];

/// Size of each node's data tmpfs: room for a long run, small enough to fill at once.
const DATA_TMPFS_MIB: u64 = 512;

/// Wall-clock skews a [`Fault::SkewClock`] cycles through (seconds). Kept well inside the
/// protocol's 60 s: the SDK's clock follows the versions it receives, and a client whose
/// clock ran more than 60 s ahead of a leader would be refused (correctly) on every request.
const SKEWS_S: [i64; 3] = [25, -25, 0];

/// How long a fault lasts: beyond the election timeout maximum (500 ms), so it bites.
const HOLD: Duration = Duration::from_millis(1_500);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// SplitMix64: a fixed sequence per seed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fresh SDK client's SET is acknowledged (retried for up to 30 s).
async fn probe_write(port: u16, cycle: u64) {
    let probe = SdkClient::connect(port, &format!("cycle-probe-{cycle}")).await;
    let key = format!("cycle-probe-{cycle}");
    let what = format!("cycle {cycle}, after the heal");
    set_until_acknowledged(&probe, key.as_bytes(), Duration::from_secs(30), &what).await;
    probe.shutdown().await;
}

async fn inject(lab: &NetLab, cluster: &mut Cluster, fault: Fault, skews_done: &mut usize) {
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let follower = (leader + 1) % cluster.nodes.len();
    match fault {
        Fault::RestartAll => {
            for node in cluster.nodes.iter_mut() {
                node.kill();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            for node in cluster.nodes.iter_mut() {
                node.spawn();
            }
        }
        Fault::SlowFsyncLeader => {
            let slow = SlowFsync::attach(cluster.nodes[leader].pid(), Duration::from_millis(300));
            tokio::time::sleep(HOLD * 2).await;
            drop(slow);
        }
        Fault::DiskFullLeader => {
            let node = &mut cluster.nodes[leader];
            let fill = DiskFill::fill(&node.data_dir);
            let exit = node.wait_exit(Duration::from_secs(20)).await;
            assert!(
                exit.is_some_and(|status| !status.success()),
                "node {} (leader) went on running on a full disk ({} bytes of fill), or exited \
                 0: {exit:?}; log:\n{}",
                node.id,
                fill.bytes,
                node.log_tail(40)
            );
            // Raft's error is the one reported (not a task that ended with it).
            assert!(
                node.log_tail(60).contains("raft stopped on a fatal error"),
                "node {} exited without naming Raft's error; log:\n{}",
                node.id,
                node.log_tail(40)
            );
            drop(fill);
            node.spawn();
        }
        Fault::BrokerCutLeader => {
            // The leader keeps its peers but loses the broker: it must hand over leadership
            // (after the ack timeout and twice the election timeout) to a node that serves.
            lab.set_faults(leader, Faults::BROKER_CUT);
            let probe = SdkClient::connect(cluster.broker.port, "broker-cut-probe").await;
            set_until_acknowledged(
                &probe,
                b"broker-cut-probe",
                Duration::from_secs(60),
                "leader cut from the broker",
            )
            .await;
            probe.shutdown().await;
            lab.heal(leader);
        }
        Fault::BrokerRestart => {
            // SIGTERM: Mosquitto saves the sessions, which clients and nodes resume.
            cluster.broker.restart_gracefully();
        }
        Fault::SkewClock => {
            let skew = SKEWS_S[*skews_done % SKEWS_S.len()];
            *skews_done += 1;
            let node = &mut cluster.nodes[leader];
            node.kill();
            node.set_env(skewed_clock_env(skew));
            node.spawn();
        }
        Fault::KillLeader | Fault::KillFollower => {
            let victim = if fault == Fault::KillLeader {
                leader
            } else {
                follower
            };
            cluster.nodes[victim].kill();
            tokio::time::sleep(HOLD).await;
            cluster.nodes[victim].spawn();
        }
        Fault::PauseLeader => {
            cluster.nodes[leader].pause();
            tokio::time::sleep(HOLD).await;
            cluster.nodes[leader].resume();
        }
        Fault::PartitionLeader | Fault::PartitionLeaderInbound | Fault::PartitionFollower => {
            let (victim, faults) = match fault {
                Fault::PartitionLeader => (leader, Faults::RAFT_CUT),
                Fault::PartitionLeaderInbound => (
                    leader,
                    Faults {
                        raft_in: true,
                        ..Faults::default()
                    },
                ),
                _ => (follower, Faults::RAFT_CUT),
            };
            lab.set_faults(victim, faults);
            tokio::time::sleep(HOLD).await;
            lab.heal(victim);
        }
        Fault::FlapLeader => {
            for _ in 0..4 {
                lab.set_faults(leader, Faults::RAFT_CUT);
                tokio::time::sleep(Duration::from_millis(400)).await;
                lab.heal(leader);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A seeded sequence of faults under load: the cluster serves again after every one, nothing
/// acknowledged is lost, the replicas agree, and the client history is linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeded_fault_cycles_lose_nothing_and_stay_linearizable() {
    let cycles = env_u64("STATESTORE_FAULT_CYCLES", FAULTS.len() as u64);
    // `STATESTORE_FAULT_ONLY=DiskFullLeader,KillLeader` narrows the choice (for debugging).
    let only = std::env::var("STATESTORE_FAULT_ONLY").unwrap_or_default();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| only.is_empty() || only.split(',').any(|name| name == format!("{f:?}")))
        .collect();
    assert!(
        !faults.is_empty(),
        "STATESTORE_FAULT_ONLY={only} names no fault"
    );
    let seed = env_u64("STATESTORE_FAULT_SEED", 0x5747_e570);
    let lab = NetLab::create(3);
    let mut cluster = Cluster::start_in(&lab, 3, &[]);
    for node in cluster.nodes.iter_mut() {
        node.put_data_on_tmpfs(DATA_TMPFS_MIB);
    }
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let port = cluster.broker.port;
    let writers = start_writers(port, "cycle-writer", 4, Duration::from_secs(3)).await;
    let recorder = Recorder::start(port, RecorderConfig::new("cyc")).await;

    let mut state = seed;
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut recoveries = Vec::new();
    let mut skews_done = 0;
    for cycle in 0..cycles {
        // Every fault kind once in the first cycles, then a seeded choice.
        let fault = match usize::try_from(cycle) {
            Ok(i) if i < faults.len() => faults[i],
            _ => faults[(next(&mut state) % faults.len() as u64) as usize],
        };
        inject(&lab, &mut cluster, fault, &mut skews_done).await;
        let healed = Instant::now();
        probe_write(port, cycle).await;
        cluster.wait_ready(Duration::from_secs(60)).await;
        assert!(
            cluster
                .wait_single_subscription_holder(Duration::from_secs(30))
                .await,
            "cycle {cycle} ({fault:?}): more than one subscription holder after the heal"
        );
        recoveries.push(healed.elapsed());
        *injected.entry(fault).or_default() += 1;
    }

    let (history, recording) = recorder.finish_with_report().await;
    let reports = finish_writers(writers).await;
    cluster.wait_converged(Duration::from_secs(60)).await;
    recoveries.sort();
    println!(
        "{cycles} fault cycles (seed {seed:#x}): {injected:?}; a fresh client's write \
         acknowledged after the heal: median {} ms, max {} ms",
        recoveries
            .get(recoveries.len() / 2)
            .map_or(0, |d| d.as_millis()),
        recoveries.last().map_or(0, |d| d.as_millis())
    );
    let failure = check_recorded(&history, &recording).err();
    let acked: usize = reports.iter().map(|r| r.acks.len()).sum();
    println!("writers: {acked} acknowledged writes, all read back");
    assert!(acked > 0, "no write was acknowledged at all");
    // Clients must keep working through the faults: most recorded operations got a reply.
    assert!(
        recording.summary.unknown() * 4 < recording.summary.total(),
        "more than a quarter of the recorded operations got no reply: {recording}"
    );
    assert_eq!(verify_acked(port, &reports).await, acked);
    if let Some(failure) = failure {
        panic!("{failure}");
    }
}
