//! The control file `MOUNT/.powercut`: the commands written to it and the status read from it.
//!
//! Write `cut` (a plain power cut) or `cut torn SEED` (a torn one, SEED a u64); surrounding
//! whitespace and a trailing newline are ignored, anything else fails the write with EINVAL.
//! Reading returns one `key value` line each: `cuts` (power cuts so far), `pending_pages`
//! (dirty pages over all files), `pending_files` (files whose data or size is not durable),
//! `pending_dirs` (directories whose entries are not durable), `deferred` (durable entries
//! kept by the rename rule), `inodes` (inodes held). The status is taken when the file is
//! opened, so one open reads one consistent snapshot.

use crate::model::Pending;

/// The control file's name in the root directory (hidden from `readdir`).
pub const NAME: &str = ".powercut";

/// A command written to the control file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Drop every volatile byte and name.
    Cut,
    /// Like [`Command::Cut`], but a seeded subset of each file's dirty pages survives.
    CutTorn(u64),
}

/// Parses a command (`None`: not one).
pub fn parse(text: &[u8]) -> Option<Command> {
    let text = std::str::from_utf8(text).ok()?;
    let words: Vec<&str> = text.split_whitespace().collect();
    match words[..] {
        ["cut"] => Some(Command::Cut),
        ["cut", "torn", seed] => seed.parse().ok().map(Command::CutTorn),
        _ => None,
    }
}

/// The status text.
pub fn status(cuts: u64, pending: Pending) -> String {
    format!(
        "cuts {cuts}\npending_pages {}\npending_files {}\npending_dirs {}\ndeferred {}\ninodes {}\n",
        pending.pages, pending.files, pending.dirs, pending.deferred, pending.inodes
    )
}

#[cfg(test)]
mod tests {
    use super::{Command, parse, status};
    use crate::model::Pending;

    #[test]
    fn commands() {
        let table: &[(&[u8], Option<Command>)] = &[
            (b"cut", Some(Command::Cut)),
            (b"cut\n", Some(Command::Cut)),
            (b"  cut torn 42\n", Some(Command::CutTorn(42))),
            (b"cut torn", None),
            (b"cut torn -1", None),
            (b"cut now", None),
            (b"", None),
            (b"\xff", None),
        ];
        for (text, want) in table {
            assert_eq!(parse(text), *want, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn status_lines() {
        let p = Pending {
            pages: 3,
            files: 1,
            dirs: 2,
            deferred: 0,
            inodes: 7,
        };
        assert_eq!(
            status(5, p),
            "cuts 5\npending_pages 3\npending_files 1\npending_dirs 2\ndeferred 0\ninodes 7\n"
        );
    }
}
