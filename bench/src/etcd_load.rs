//! The same workloads against etcd through the `etcd-client` crate: one gRPC client per
//! connection (balanced over every member's endpoint), K workers each. SET is a put, GET a
//! linearizable get (etcd's default), DEL a delete, SET NX PX a transaction `create_revision
//! == 0 → put` (etcd has no per-key TTL without a lease per key, so PX is left out).

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, KvClient, Txn, TxnOp};

use crate::driver::{self, Outcome, Plan, Requester};
use crate::stats::CellStats;
use crate::workload::{self, Op};

/// One etcd client connection.
pub struct EtcdConnection {
    kv: KvClient,
    timeout: Duration,
}

impl EtcdConnection {
    /// Connects to `endpoints` (`http://127.0.0.1:P`).
    pub async fn connect(endpoints: &[String], timeout: Duration) -> anyhow::Result<Self> {
        let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5));
        let client = Client::connect(endpoints, Some(options))
            .await
            .with_context(|| format!("connect to etcd at {}", endpoints.join(",")))?;
        Ok(EtcdConnection {
            kv: client.kv_client(),
            timeout,
        })
    }
}

impl Requester for EtcdConnection {
    async fn request(&self, op: Op, key: &[u8], value: &Bytes) -> Outcome {
        let mut kv = self.kv.clone();
        let key = key.to_vec();
        let start = Instant::now();
        let call = async move {
            match op {
                Op::Set => kv.put(key, value.to_vec(), None).await.map(|_| ()),
                Op::Get => kv.get(key, None).await.map(|_| ()),
                Op::Del => kv.delete(key, None).await.map(|_| ()),
                Op::SetNxPx => {
                    let txn = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key, value.to_vec(), None)]);
                    kv.txn(txn).await.map(|_| ())
                }
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(())) => {
                let received = Instant::now();
                Outcome::Ok {
                    latency: received - start,
                    received,
                }
            }
            Ok(Err(err)) => Outcome::Error(format!("etcd: {err}")),
            Err(_) => Outcome::Timeout,
        }
    }
}

/// Connects `clients` clients to `endpoints`, runs `plan` with `in_flight` workers each.
pub async fn run(
    endpoints: &[String],
    clients: usize,
    in_flight: usize,
    value_size: usize,
    timeout: Duration,
    make_plan: impl FnOnce() -> Plan,
) -> anyhow::Result<CellStats> {
    let attempts = (0..clients.max(1)).map(|_| EtcdConnection::connect(endpoints, timeout));
    let connections = futures::future::join_all(attempts)
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    let plan = make_plan();
    driver::drive(
        connections,
        in_flight,
        plan,
        workload::Values::Same(workload::value(value_size)),
    )
    .await
}

/// Waits until a linearizable get succeeds (the cluster has a leader and a quorum).
pub async fn wait_ready(endpoints: &[String], within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let mut last_error = String::from("not tried");
    while Instant::now() < deadline {
        match EtcdConnection::connect(endpoints, Duration::from_secs(2)).await {
            Ok(connection) => {
                match connection
                    .request(Op::Get, b"bench-ready", &Bytes::new())
                    .await
                {
                    Outcome::Ok { .. } => return Ok(()),
                    Outcome::Error(err) => last_error = err,
                    Outcome::Timeout => last_error = "get timed out".to_owned(),
                }
            }
            Err(err) => last_error = format!("{err:#}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("etcd not ready within {within:?}: {last_error}")
}
