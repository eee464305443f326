//! One measured cell, as `compare`, `run`, `sustained` and `devicebound` all run it: connect the clients,
//! warm up, measure a window (optionally with its per-second timeline), and sample the CPU time
//! of every process involved exactly at the start and at the end of that window.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpu::{CpuReport, Watched, WindowSampler};
use crate::driver::{Plan, Requester};
use crate::etcd_load;
use crate::mqtt_load::{self, Broker, Check, Connection, LoadOptions};
use crate::stats::CellStats;
use crate::workload::{ValueKind, WorkloadSpec};

/// How to run a cell.
#[derive(Debug, Clone)]
pub struct CellSpec {
    /// Mix and concurrency.
    pub workload: WorkloadSpec,
    /// Keys picked from.
    pub keys: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Warm-up before the window.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// Record the per-second timeline.
    pub timeline: bool,
}

impl CellSpec {
    /// The plan, its clock starting now.
    fn plan(&self) -> Plan {
        let plan = Plan::timed(self.workload.mix, self.keys, self.warmup, self.duration);
        if self.timeline {
            plan.with_timeline()
        } else {
            plan
        }
    }
}

/// What a cell measured.
#[derive(Debug)]
pub struct Measured {
    /// Counts, latencies and (if asked) the timeline.
    pub stats: CellStats,
    /// CPU per process over the window (`None` if it could not be sampled).
    pub cpu: Option<CpuReport>,
    /// The measured window `[start, end)`.
    pub window: Option<(Instant, Instant)>,
}

/// Builds the plan once the clients are connected and starts sampling `watched` over its window.
fn planned(spec: &CellSpec, watched: &Arc<[Watched]>, sampler: &mut Option<WindowSampler>) -> Plan {
    let plan = spec.plan();
    *sampler = plan
        .window()
        .map(|(start, end)| WindowSampler::spawn(watched.clone(), start, end));
    plan
}

async fn finish(stats: CellStats, sampler: Option<WindowSampler>) -> Measured {
    let window = sampler.as_ref().map(WindowSampler::window);
    let cpu = match sampler {
        Some(sampler) => sampler.finish(stats.completed_in_window).await,
        None => None,
    };
    Measured { stats, cpu, window }
}

/// Runs a cell through an MQTT broker (statestore or the floor).
pub async fn mqtt(
    broker: &Broker,
    check: Check,
    spec: &CellSpec,
    watched: &Arc<[Watched]>,
) -> anyhow::Result<Measured> {
    mqtt_with(broker, check, spec, watched, |_, connection| connection).await
}

/// As [`mqtt`], driving the requesters `wrap` makes of the connections (given each one's
/// index), e.g. device-bound SENDs instead of state store requests.
pub async fn mqtt_with<R: Requester>(
    broker: &Broker,
    check: Check,
    spec: &CellSpec,
    watched: &Arc<[Watched]>,
    wrap: impl Fn(usize, Connection) -> R,
) -> anyhow::Result<Measured> {
    let options = LoadOptions {
        clients: spec.workload.clients,
        in_flight: spec.workload.in_flight,
        value_size: spec.value_size,
        values: ValueKind::Pattern,
        timeout: spec.timeout,
        check,
    };
    let mut sampler = None;
    let stats = mqtt_load::run_with(broker, &options, wrap, || {
        planned(spec, watched, &mut sampler)
    })
    .await?;
    Ok(finish(stats, sampler).await)
}

/// Runs a cell against etcd.
pub async fn etcd(
    endpoints: &[String],
    spec: &CellSpec,
    watched: &Arc<[Watched]>,
) -> anyhow::Result<Measured> {
    let mut sampler = None;
    let stats = etcd_load::run(
        endpoints,
        spec.workload.clients,
        spec.workload.in_flight,
        spec.value_size,
        spec.timeout,
        || planned(spec, watched, &mut sampler),
    )
    .await?;
    Ok(finish(stats, sampler).await)
}
