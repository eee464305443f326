//! `statestore-bench`: the load generator and baseline comparison of statestore. `compare`
//! starts the broker floor (Mosquitto + echo responder), a 3-member etcd cluster and
//! statestore with 1 and 3 nodes in temporary directories and runs the same workloads against
//! each; `run` drives an already running statestore; `scale` loads many keys and measures
//! memory, disk, load rate and restart time. Every process started is stopped on exit, error or
//! Ctrl-C.

mod cli;
mod compare;
mod driver;
mod echo_responder;
mod etcd_load;
mod mqtt_load;
mod processes;
mod report;
mod resp;
mod scale;
mod stats;
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
            Command::Scale(args) => scale::scale(args).await,
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
