//! `statestore`: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use statestore_node::cli::{Cli, CliCommand};
use statestore_node::{admin, kv, node, telemetry};

/// mimalloc instead of glibc malloc: the apply path and the state database allocate and free
/// small buffers at a high rate, where glibc's arenas fragment (see BENCHMARKS.md; measured
/// while the state database was sled). The `system-allocator` feature keeps glibc's, for heap
/// profilers that interpose malloc (heaptrack).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Usage errors exit with 2 (clap's own convention, and `statestore kv`'s).
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("statestore")
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("statestore: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result: anyhow::Result<()> = runtime.block_on(async move {
        match cli.command {
            CliCommand::Run(args) => {
                let config = args.into_config()?;
                let _telemetry = telemetry::init(&config.telemetry)?;
                node::run(config).await?;
                Ok(())
            }
            CliCommand::Cluster(args) => {
                println!("{}", admin::run(&args).await?);
                Ok(())
            }
            CliCommand::Policy(args) => {
                println!("{}", args.run()?);
                Ok(())
            }
            CliCommand::Settings(args) => {
                args.run()?;
                Ok(())
            }
            // Its own exit statuses (0 found, 1 missing, 2 error); it prints its errors.
            CliCommand::Kv(args) => std::process::exit(i32::from(kv::run(*args).await)),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("statestore: {err}");
            ExitCode::FAILURE
        }
    }
}
