//! `powercut-fs --backing DIR --mount DIR`: mounts the power-cut filesystem, prints `ready`,
//! serves until unmounted or SIGTERM/SIGINT (see the library's doc for the semantics).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;

use clap::Parser;
use fuser::{Config, MountOption, Session, SessionACL};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use statestore_powercut_fs::backing::Backing;
use statestore_powercut_fs::error::Error;
use statestore_powercut_fs::fs::{Event, PowercutFs};

/// A FUSE filesystem whose unsynced writes a power cut drops.
#[derive(Parser, Debug)]
#[command(name = "powercut-fs")]
struct Args {
    /// Where the durable state is written (and loaded from, if it holds one).
    #[arg(long)]
    backing: PathBuf,
    /// The mount point (an existing directory).
    #[arg(long)]
    mount: PathBuf,
}

/// fuser's own warnings (e.g. an operation it does not implement) go to stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            eprintln!("powercut-fs: {}: {}", record.level(), record.args());
        }
    }

    fn flush(&self) {}
}

static LOG: StderrLog = StderrLog;

fn run(args: Args) -> Result<(), Error> {
    let (backing, state) = Backing::open(&args.backing)?;
    let (tx, rx) = mpsc::channel();
    let mut signals = Signals::new([SIGTERM, SIGINT]).map_err(|source| Error::Fuse {
        what: "installing signal handlers",
        source,
    })?;
    let on_signal = tx.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = on_signal.send(Event::Signal);
        }
    });
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("powercut-fs".into()),
        MountOption::Subtype("powercut".into()),
        MountOption::AutoUnmount,
    ];
    // auto_unmount needs allow_root/allow_other (fusermount3 enforces the root-only part).
    config.acl = SessionACL::RootAndOwner;
    config.n_threads = Some(1);
    let fs = PowercutFs::new(state, backing, tx);
    let session = Session::new(fs, &args.mount, &config).map_err(|source| Error::Fuse {
        what: "mounting",
        source,
    })?;
    let session = session.spawn().map_err(|source| Error::Fuse {
        what: "starting the session",
        source,
    })?;
    // The kernel's INIT was answered inside Session::new: the mount is usable.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "ready").and_then(|()| out.flush());
    if let Ok(Event::Signal) = rx.recv() {
        unmount(&args.mount)?;
    }
    session.join().map_err(|source| Error::Fuse {
        what: "serving",
        source,
    })
}

/// Unmounts through `fusermount3 -u` (lazily if the mount is busy). fuser's own unmount
/// under `auto_unmount` only closes fusermount3's socket, and fusermount3 then exits without
/// unmounting while this process still serves.
fn unmount(mount: &Path) -> Result<(), Error> {
    for flags in ["-u", "-uz"] {
        let status = std::process::Command::new("fusermount3")
            .arg(flags)
            .arg(mount)
            .status()
            .map_err(|source| Error::Fuse {
                what: "running fusermount3",
                source,
            })?;
        if status.success() {
            return Ok(());
        }
    }
    Err(Error::Fuse {
        what: "unmounting",
        source: std::io::Error::other("fusermount3 -u and -uz failed"),
    })
}

fn main() -> ExitCode {
    let _ = log::set_logger(&LOG).map(|()| log::set_max_level(log::LevelFilter::Warn));
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("powercut-fs: {e}");
            ExitCode::FAILURE
        }
    }
}
