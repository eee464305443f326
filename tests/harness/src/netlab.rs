//! A network laboratory for fault tests: every node runs in its own network namespace with two
//! links, one to the broker network and one to the Raft network (two bridges in the root
//! namespace, where Mosquitto and the test itself run). nftables rules inside a node's
//! namespace cut its Raft or broker traffic, in one direction or both, while everything else
//! keeps flowing. Needs root (namespaces, links, nftables); everything is removed on drop.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Which of a node's links drop packets, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Raft packets arriving at the node are dropped.
    pub raft_in: bool,
    /// Raft packets leaving the node are dropped.
    pub raft_out: bool,
    /// Broker packets arriving at the node are dropped.
    pub broker_in: bool,
    /// Broker packets leaving the node are dropped.
    pub broker_out: bool,
}

impl Faults {
    /// No Raft traffic either way (the broker link stays).
    pub const RAFT_CUT: Faults = Faults {
        raft_in: true,
        raft_out: true,
        broker_in: false,
        broker_out: false,
    };
    /// No broker traffic either way (Raft stays).
    pub const BROKER_CUT: Faults = Faults {
        raft_in: false,
        raft_out: false,
        broker_in: true,
        broker_out: true,
    };
}

/// The namespaces, links and bridges of one test.
pub struct NetLab {
    tag: String,
    subnet: u8,
    nodes: usize,
}

static LABS: AtomicU32 = AtomicU32::new(0);

impl NetLab {
    /// Creates namespaces for `nodes` nodes. Panics with the failing command when the lab
    /// cannot be built (not root, `ip` or `nft` missing).
    pub fn create(nodes: usize) -> NetLab {
        let euid = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        assert_eq!(
            euid, "0",
            "network-namespace fault tests need root (ip netns, nftables)"
        );
        let serial = LABS.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tag = format!(
            "{:04x}",
            (pid.wrapping_mul(31).wrapping_add(serial)) & 0xffff
        );
        let subnet = 20 + u8::try_from((pid + serial) % 200).unwrap_or(0);
        let lab = NetLab { tag, subnet, nodes };
        lab.build();
        lab
    }

    fn build(&self) {
        let (broker_bridge, raft_bridge) = (self.bridge("m"), self.bridge("r"));
        for bridge in [&broker_bridge, &raft_bridge] {
            run("ip", &["link", "add", bridge, "type", "bridge"]);
            run("ip", &["link", "set", bridge, "up"]);
        }
        let gateway = format!("{}/24", self.broker_ip());
        run("ip", &["addr", "add", &gateway, "dev", &broker_bridge]);
        for i in 0..self.nodes {
            let ns = self.netns(i);
            run("ip", &["netns", "add", &ns]);
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            for (kind, bridge, inside, address) in [
                ("m", &broker_bridge, "broker0", self.broker_net_ip(i)),
                ("r", &raft_bridge, "raft0", self.raft_ip(i)),
            ] {
                let host_side = format!("{}{kind}{i}", self.prefix());
                run(
                    "ip",
                    &[
                        "link", "add", &host_side, "type", "veth", "peer", "name", inside, "netns",
                        &ns,
                    ],
                );
                run("ip", &["link", "set", &host_side, "master", bridge]);
                run("ip", &["link", "set", &host_side, "up"]);
                let cidr = format!("{address}/24");
                run("ip", &["-n", &ns, "addr", "add", &cidr, "dev", inside]);
                run("ip", &["-n", &ns, "link", "set", inside, "up"]);
            }
            self.nft(i, "add table inet fault");
            self.nft(
                i,
                "add chain inet fault input { type filter hook input priority 0; }",
            );
            self.nft(
                i,
                "add chain inet fault output { type filter hook output priority 0; }",
            );
        }
    }

    fn prefix(&self) -> String {
        format!("ss{}", self.tag)
    }

    fn bridge(&self, kind: &str) -> String {
        format!("{}b{kind}", self.prefix())
    }

    /// Namespace of node `i` (0-based).
    pub fn netns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix())
    }

    /// The root namespace's address on the broker network (where Mosquitto listens).
    pub fn broker_ip(&self) -> String {
        format!("10.{}.0.1", self.subnet)
    }

    /// Node `i`'s address on the broker network (its HTTP listener is there too).
    pub fn broker_net_ip(&self, i: usize) -> String {
        format!("10.{}.0.{}", self.subnet, 10 + i)
    }

    /// Node `i`'s address on the Raft network.
    pub fn raft_ip(&self, i: usize) -> String {
        format!("10.{}.1.{}", self.subnet, 10 + i)
    }

    /// Makes node `i`'s links drop what `faults` says (replacing earlier faults).
    pub fn set_faults(&self, i: usize, faults: Faults) {
        self.nft(i, "flush chain inet fault input");
        self.nft(i, "flush chain inet fault output");
        let rules = [
            (faults.raft_in, "input iifname \"raft0\""),
            (faults.raft_out, "output oifname \"raft0\""),
            (faults.broker_in, "input iifname \"broker0\""),
            (faults.broker_out, "output oifname \"broker0\""),
        ];
        for (on, rule) in rules {
            if on {
                self.nft(i, &format!("add rule inet fault {rule} drop"));
            }
        }
    }

    /// Removes every fault of node `i`.
    pub fn heal(&self, i: usize) {
        self.set_faults(i, Faults::default());
    }

    fn nft(&self, i: usize, rule: &str) {
        let ns = self.netns(i);
        let mut args = vec!["netns", "exec", &ns, "nft"];
        args.extend(rule.split(' '));
        run("ip", &args);
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        for i in 0..self.nodes {
            let _ = quiet("ip", &["netns", "del", &self.netns(i)]);
        }
        for kind in ["m", "r"] {
            let _ = quiet("ip", &["link", "del", &self.bridge(kind)]);
        }
    }
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} not runnable ({e}); scripts/prereqs.sh installs it"));
    assert!(
        output.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn quiet(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
