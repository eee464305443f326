//! A data directory on the power-cut test filesystem (`powercut-fs`, `tests/powercut-fs`): a
//! FUSE mount whose writes stay volatile until the program syncs them, and whose control file
//! drops everything volatile at once, as losing power would. [`PowerCutFs`] mounts one and
//! cuts its power; [`crate::node::StatestoreNode::put_data_on_powercut_fs`] puts a node's data
//! on one.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a mount may take to report `ready`.
const MOUNT_WAIT: Duration = Duration::from_secs(30);

/// The control file inside the mount (see the filesystem's docs).
const CONTROL_FILE: &str = ".powercut";

/// The `powercut-fs` binary: `$POWERCUT_FS_BIN` (scripts/test.sh exports it), or the one next
/// to the test executable's target directory (built by `cargo build -p statestore-powercut-fs`).
pub fn powercut_fs_bin() -> PathBuf {
    if let Ok(path) = std::env::var("POWERCUT_FS_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile> directory");
    let bin = profile_dir.join("powercut-fs");
    assert!(
        bin.exists(),
        "{} not found: run `cargo build -p statestore-powercut-fs` first (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// How much of the unsynced state a cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Everything unsynced is lost.
    Clean,
    /// A seeded choice of pending page writes survives (a torn write), the rest is lost.
    Torn(u64),
}

/// A mounted power-cut filesystem; unmounted when dropped.
pub struct PowerCutFs {
    /// Where it is mounted.
    pub mount: PathBuf,
    /// The directory holding its durable state.
    pub backing: PathBuf,
    child: Option<Child>,
}

impl PowerCutFs {
    /// Mounts `backing` at `mount` (both must exist) and waits for the filesystem's `ready`.
    pub fn mount(backing: &Path, mount: &Path) -> PowerCutFs {
        let mut child = Command::new(powercut_fs_bin())
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(mount)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start powercut-fs (root, fuse3 installed?)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(|line| line.ok());
            let _ = ready_tx.send(first);
            // Keep draining so the filesystem never blocks on a full pipe.
            for _ in lines {}
        });
        let mut fs = PowerCutFs {
            mount: mount.to_owned(),
            backing: backing.to_owned(),
            child: Some(child),
        };
        match ready_rx.recv_timeout(MOUNT_WAIT) {
            Ok(Some(line)) if line.trim() == "ready" => fs,
            other => {
                let exit = fs.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                panic!(
                    "powercut-fs on {} did not report ready within {MOUNT_WAIT:?}: {other:?}, \
                     exit {exit:?}",
                    mount.display()
                );
            }
        }
    }

    /// Cuts the power: every write, create, rename and unlink not yet synced is dropped (or,
    /// with [`Cut::Torn`], partly kept). Processes using the mount must be gone first: a cut
    /// models the machine losing power, not one program.
    pub fn cut(&self, cut: Cut) {
        let command = match cut {
            Cut::Clean => "cut\n".to_owned(),
            Cut::Torn(seed) => format!("cut torn {seed}\n"),
        };
        let mut control = std::fs::OpenOptions::new()
            .write(true)
            .open(self.mount.join(CONTROL_FILE))
            .unwrap_or_else(|err| panic!("open {}/{CONTROL_FILE}: {err}", self.mount.display()));
        control
            .write_all(command.as_bytes())
            .unwrap_or_else(|err| panic!("{command:?} to {}: {err}", self.mount.display()));
    }

    /// The filesystem's status text (pending pages and namespace changes, cuts so far).
    pub fn status(&self) -> String {
        std::fs::read_to_string(self.mount.join(CONTROL_FILE))
            .unwrap_or_else(|err| panic!("read {}/{CONTROL_FILE}: {err}", self.mount.display()))
    }
}

impl Drop for PowerCutFs {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status();
    }
}
