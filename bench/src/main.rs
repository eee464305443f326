//! `statestore-bench`: the load generator and baseline comparison of statestore. `compare`
//! starts the broker floor (Mosquitto + echo responder), a 3-member etcd cluster and
//! statestore with 1 and 3 nodes in temporary directories and runs the same workloads against
//! each; `run` drives an already running statestore; `sustained` keeps one prefilled cluster
//! (and optionally the baselines) alive and measures long windows second by second, with the
//! CPU per operation of every process; `scale` loads many keys and measures memory, disk, load
//! rate and restart time; `devicebound` measures the device-bound queues (SEND throughput
//! against SET, send-to-delivery latency, the drain of full queues). Every process started is
//! stopped on exit, error or Ctrl-C.

mod abuse;
mod abuse_attacks;
mod abuse_report;
mod cell;
mod cli;
mod compare;
mod cpu;
mod device_drain;
mod device_fleet;
mod device_open_loop;
mod device_recorder;
mod device_send;
mod devicebound;
mod devicebound_report;
mod driver;
mod echo_responder;
mod etcd_load;
mod mqtt_load;
mod node_counters;
mod proc_stat;
mod processes;
mod report;
mod resp;
mod scale;
mod stability;
mod stats;
mod sustained;
mod sustained_report;
mod timeline;
mod workload;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let work = async move {
        match cli.command {
            Command::Compare(args) => compare::compare(args).await,
            Command::Run(args) => compare::run(args).await,
            Command::Sustained(args) => sustained::sustained(args).await,
            Command::Scale(args) => scale::scale(args).await,
            Command::Devicebound(args) => devicebound::devicebound(args).await,
            Command::Abuse(args) => abuse::abuse(args).await,
        }
    };
    // Cancelling `work` drops every process guard inside it, which kills the processes.
    let outcome = tokio::select! {
        outcome = work => outcome,
        reason = interrupted() => Err(anyhow::anyhow!("{reason}: stopping every process started")),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() -> &'static str {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return "interrupted";
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = terminate.recv() => "terminated",
    }
}
