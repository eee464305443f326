//! `powercut-fs`: a FUSE filesystem for power-cut tests (test tooling, not the product).
//!
//! `powercut-fs --backing DIR --mount DIR` mounts at MOUNT a filesystem whose writes stay in a
//! volatile layer until they are synced, prints exactly one line `ready` on stdout once the
//! mount is usable, and serves until it is unmounted (`fusermount3 -u MOUNT`) or gets SIGTERM
//! or SIGINT (then it unmounts and exits 0). It mounts with `auto_unmount`, so the mount goes
//! away even if the process is killed.
//!
//! # What is durable
//! The whole filesystem is held in memory as an inode model ([`model`]): the *durable* state
//! (what survives a power cut) and, over it, the *volatile* one that reads see (like a page
//! cache). The durable state is also written to BACKING at each sync ([`backing`]), so it can
//! be inspected, and a restarted `powercut-fs` on the same BACKING starts from it. (An
//! in-memory durable image is exact and simple: a passthrough to real files could not hold
//! "data durable, name not yet" without a format of its own anyway.)
//!
//! - **File data and size** (writes, `truncate`/`ftruncate`/`set_len`, `fallocate` growing the
//!   file) stay volatile, in 4 KiB pages ([`pages`]), until `fsync` or `fdatasync` *of that
//!   file* (FUSE `fsync`, with or without the datasync flag: both persist data and size).
//!   `sync_file_range` never reaches a FUSE filesystem and persists nothing; `sync`/`syncfs`
//!   persist nothing either. A write through an fd opened with `O_SYNC` or `O_DSYNC` is
//!   followed by an fsync of its file (the kernel sends none for them under direct IO);
//!   `O_DIRECT` changes nothing.
//! - **Names** (create, mknod of regular files, mkdir, symlink, link, rename, unlink, rmdir)
//!   are volatile until their parent directory is synced (FUSE `fsyncdir`, i.e. `fsync` of an
//!   fd of the directory), which persists that directory's whole entry list. A file created
//!   and fsynced whose directory was never synced does not exist after a cut; a file unlinked
//!   without a directory sync comes back after a cut with its durable content. `fsync` of a
//!   file never persists its name.
//! - **Cross-directory rename** (see [`model`]): each directory's half persists with that
//!   directory's sync, except that a sync never removes the last durable name of a file that
//!   is still linked: syncing only the target leaves the file under both names after a cut,
//!   syncing only the source leaves it under the old name; once both are synced, only the new
//!   name survives.
//! - **Attributes** (permissions, owner) change at once and are never reverted by a cut;
//!   timestamps are not modelled at all.
//!
//! # Cutting the power
//! Write to `MOUNT/.powercut` (hidden from `readdir`; see [`control`]):
//! - `cut`: every volatile byte, size and name is dropped; afterwards the view is exactly the
//!   durable state. Every open handle (file or directory) is forgotten too: further IO on an
//!   fd opened before the cut fails with EIO (a rebooted machine has no such fd).
//! - `cut torn SEED`: the same, but first each file's pending pages survive at page
//!   granularity: every dirty page independently with probability 1/2, drawn from ChaCha8
//!   seeded with SEED (files in inode-number order, pages in offset order), so a seed always
//!   tears the same way. A surviving page is written whole: its current 4 KiB, zeros past the
//!   current end of file. The durable size grows to cover surviving pages past it (never past
//!   the current size) and never shrinks (a pending truncation is lost). Names are dropped as
//!   with `cut`.
//!
//! Reading `.powercut` returns `key value` lines: `cuts`, `pending_pages`, `pending_files`,
//! `pending_dirs`, `deferred`, `inodes`.
//!
//! # What the kernel sees
//! Direct IO and zero cache TTLs (see [`fs`]): no kernel page cache, so nothing hides the
//! volatile layer and nothing survives a cut in the kernel. File locks are local to the mount
//! (kernel-side). Not supported: shared writable `mmap`, special files (FIFOs, devices),
//! xattrs, `RENAME_EXCHANGE`, `fallocate` modes other than 0 and `KEEP_SIZE`.

pub mod backing;
pub mod control;
pub mod error;
pub mod fs;
pub mod model;
pub mod pages;
