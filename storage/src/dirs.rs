//! Durable directories: a directory created (or a name added to or removed from one) survives a
//! power cut only once its parent directory (resp. the directory itself) is fsynced. Every
//! directory statestore creates goes through [`create_durable`]; every rename or unlink that
//! must survive is followed by [`sync_dir`].

use std::fs::File;
use std::io;
use std::path::Path;

/// Creates `path` and any missing ancestors, fsyncing the parent of each directory it creates
/// (so a new data directory and a new subdirectory of it are both recorded). The parent of
/// `path` is fsynced even when `path` already existed: an earlier run may have created it and
/// stopped before its parent reached the disk.
pub fn create_durable(path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = path;
    while !at.is_dir() {
        missing.push(at);
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    for dir in missing.iter().rev() {
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            // Another creator won the race: the name exists, its parent is synced below.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(err) => return Err(err),
        }
        sync_parent(dir)?;
    }
    if missing.is_empty() {
        sync_parent(path)?;
    }
    Ok(())
}

/// Fsyncs the directory `dir` (its entries: names created, renamed or removed in it).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Fsyncs the directory holding `path` (the current directory for a bare name).
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => sync_dir(Path::new(".")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_every_missing_level_and_accepts_an_existing_one() {
        let root = tempfile::tempdir().expect("tempdir");
        let deep = root.path().join("data").join("state");
        create_durable(&deep).expect("create");
        assert!(deep.is_dir());
        create_durable(&deep).expect("again: nothing to create, the parent is synced");
        let file = root.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(
            create_durable(&file.join("below")).is_err(),
            "a file is in the way"
        );
    }
}
