//! A cluster of `statestore` processes sharing one Mosquitto: start N nodes with each other as
//! peers, find the leader, wait for digests to converge, grow and shrink membership.

use std::time::{Duration, Instant};

use crate::broker::Broker;
use crate::netlab::NetLab;
use crate::node::{AdminAccess, NodeSpec, Placement, StatestoreNode};
use crate::{free_port, wait_for};

/// Raft timing used by cluster tests, spelled out (equal to the shipped defaults) so the
/// failover figures the tests print are the ones users get.
pub const TEST_TIMING: [&str; 6] = [
    "--heartbeat-ms",
    "100",
    "--election-timeout-min-ms",
    "250",
    "--election-timeout-max-ms",
    "500",
];

/// Broker plus nodes.
pub struct Cluster {
    /// The shared broker.
    pub broker: Broker,
    /// Nodes, index i has id i+1.
    pub nodes: Vec<StatestoreNode>,
    /// How the nodes' HTTP listeners are reached (see [`Cluster::with_admin_access`]).
    pub admin: AdminAccess,
    /// Flags of nodes started by [`Cluster::add_node`], besides the timing and `--join`.
    pub join_args: Vec<String>,
}

/// Replicas that did not report one digest at one applied index in time: what each running
/// node last reported (its digest, or its status when the digest endpoint did not answer).
#[derive(Debug)]
pub struct NotConverged {
    /// One report per running node, in node order.
    pub seen: Vec<serde_json::Value>,
}

impl std::fmt::Display for NotConverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.seen)
    }
}

impl Cluster {
    /// Starts `size` nodes that bootstrap together; `extra` flags go to every node.
    pub fn start(size: usize, extra: &[&str]) -> Cluster {
        let broker = Broker::start();
        let ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let peers: Vec<(u64, String)> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u64 + 1, format!("127.0.0.1:{p}")))
            .collect();
        let mut args: Vec<String> = TEST_TIMING.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let nodes = peers
            .iter()
            .zip(&ports)
            .map(|((id, _), port)| {
                StatestoreNode::start(
                    &broker,
                    NodeSpec {
                        id: *id,
                        peers: peers.clone(),
                        raft_port: Some(*port),
                        extra_args: args.clone(),
                        placement: None,
                        broker: None,
                    },
                )
            })
            .collect();
        Cluster {
            broker,
            nodes,
            admin: AdminAccess::default(),
            join_args: Vec::new(),
        }
    }

    /// Reaches every node's HTTP listener (and those added later) with `access`: HTTPS and a
    /// token, for nodes started with `--http-tls-*` and `--admin-token-file`.
    pub fn with_admin_access(mut self, access: AdminAccess) -> Cluster {
        for node in &mut self.nodes {
            node.admin = access.clone();
        }
        self.admin = access;
        self
    }

    /// Starts `size` nodes, node i in namespace i of `lab`, with a broker every namespace
    /// reaches; `extra` flags go to every node.
    pub fn start_in(lab: &NetLab, size: usize, extra: &[&str]) -> Cluster {
        let broker = Broker::start_on("0.0.0.0");
        let ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let peers: Vec<(u64, String)> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u64 + 1, format!("{}:{p}", lab.raft_ip(i))))
            .collect();
        let mut args: Vec<String> = TEST_TIMING.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let nodes = (0..size)
            .map(|i| {
                StatestoreNode::start(
                    &broker,
                    NodeSpec {
                        id: i as u64 + 1,
                        peers: peers.clone(),
                        raft_port: Some(ports[i]),
                        extra_args: args.clone(),
                        placement: Some(Placement {
                            netns: lab.netns(i),
                            http_ip: lab.broker_net_ip(i),
                            raft_ip: lab.raft_ip(i),
                            broker: format!("{}:{}", lab.broker_ip(), broker.port),
                        }),
                        broker: None,
                    },
                )
            })
            .collect();
        Cluster {
            broker,
            nodes,
            admin: AdminAccess::default(),
            join_args: Vec::new(),
        }
    }

    /// Waits until every running node is ready.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        for node in self.nodes.iter_mut() {
            if node.is_running() {
                node.wait_ready(timeout).await;
            }
        }
    }

    /// Index of the node that is leader and holds the request subscription, if exactly one.
    pub async fn serving_leader(&mut self) -> Option<usize> {
        let mut found = None;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if !node.is_running() {
                continue;
            }
            let Some(status) = node.status().await else {
                continue;
            };
            if status["state"] == "Leader"
                && status["request_subscription_active"] == true
                && status["ready"] == true
            {
                if found.is_some() {
                    return None;
                }
                found = Some(i);
            }
        }
        found
    }

    /// Waits for a serving leader.
    pub async fn wait_serving_leader(&mut self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.serving_leader().await {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no serving leader after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sum over running nodes of `statestore_mqtt_request_subscription_active`.
    pub async fn subscription_holders(&mut self) -> f64 {
        let mut sum = 0.0;
        for node in self.nodes.iter_mut() {
            if node.is_running() {
                sum += node
                    .metric("statestore_mqtt_request_subscription_active")
                    .await
                    .unwrap_or(0.0);
            }
        }
        sum
    }

    /// Waits until exactly one node holds the request subscription; false on timeout.
    pub async fn wait_single_subscription_holder(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.subscription_holders().await == 1.0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Waits until every running node reports the same digest at the same applied index;
    /// panics with what each node reported after `timeout`.
    pub async fn wait_converged(&mut self, timeout: Duration) -> Vec<serde_json::Value> {
        match self.try_converged(timeout).await {
            Ok(digests) => digests,
            Err(not) => panic!("digests did not converge within {timeout:?}: {not}"),
        }
    }

    /// [`Cluster::wait_converged`], returning what each node last reported (its digest, or
    /// its status when the digest endpoint did not answer) instead of panicking.
    pub async fn try_converged(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<serde_json::Value>, NotConverged> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_running())
            .collect();
        let nodes = &self.nodes;
        let result = wait_for(timeout, || async {
            let mut digests = Vec::new();
            for i in &running {
                digests.push(nodes[*i].digest().await?);
            }
            let first = &digests[0];
            digests
                .iter()
                .all(|d| {
                    d["digest"] == first["digest"] && d["applied_index"] == first["applied_index"]
                })
                .then_some(digests)
        })
        .await;
        match result {
            Some(digests) => Ok(digests),
            None => {
                let mut seen = Vec::new();
                for i in &running {
                    let report = match nodes[*i].digest().await {
                        Some(digest) => digest,
                        None => {
                            serde_json::json!({ "no digest; status": nodes[*i].status().await })
                        }
                    };
                    seen.push(report);
                }
                Err(NotConverged { seen })
            }
        }
    }

    /// Starts node `id` with `--join` (no bootstrap) and adds it through `via`'s admin API.
    pub async fn add_node(&mut self, via: usize) -> usize {
        self.add_node_with(via, |_| {}).await
    }

    /// [`Cluster::add_node`], with `prepare` run on the started node before it is added (e.g.
    /// to move its data onto another filesystem before the leader sends it a snapshot).
    pub async fn add_node_with(
        &mut self,
        via: usize,
        prepare: impl FnOnce(&mut StatestoreNode),
    ) -> usize {
        let id = self.nodes.len() as u64 + 1;
        let raft_port = free_port();
        let mut args: Vec<String> = TEST_TIMING.iter().map(|s| s.to_string()).collect();
        args.push("--join".into());
        args.extend(self.join_args.iter().cloned());
        let mut node = StatestoreNode::start(
            &self.broker,
            NodeSpec {
                id,
                peers: vec![],
                raft_port: Some(raft_port),
                extra_args: args,
                placement: None,
                broker: None,
            },
        );
        node.admin = self.admin.clone();
        prepare(&mut node);
        self.nodes.push(node);
        let body = serde_json::json!({"action": "add", "id": id, "raft": format!("127.0.0.1:{raft_port}")});
        self.admin_post(via, body).await;
        self.nodes.len() - 1
    }

    /// Removes node `index` from the cluster through `via`'s admin API (the process keeps running).
    pub async fn remove_node(&mut self, index: usize, via: usize) {
        let body = serde_json::json!({"action": "remove", "id": self.nodes[index].id});
        self.admin_post(via, body).await;
    }

    /// Posts `body` to `via`'s `/admin/members` and asserts it succeeded. A change refused
    /// because no node leads at that moment (an election after a cut, a leader handing over)
    /// was not made: it is sent again through the next serving leader, for up to a minute.
    pub async fn admin_post(&mut self, via: usize, body: serde_json::Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut via = via;
        loop {
            let (status, text) = self.nodes[via]
                .request(
                    "POST",
                    "/admin/members",
                    Some(&body),
                    Duration::from_secs(120),
                )
                .await
                .expect("admin request answered");
            if (200..300).contains(&status) {
                return;
            }
            let no_leader = status == 409 && text.contains("not the leader");
            assert!(
                no_leader && Instant::now() < deadline,
                "membership change {body} failed: {status} {text}"
            );
            via = self
                .wait_serving_leader(deadline.saturating_duration_since(Instant::now()))
                .await;
        }
    }
}
