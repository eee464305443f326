//! The backing directory: a copy of the durable state, written at each sync, so it can be
//! inspected and so a restarted `powercut-fs` finds the durable state again.
//!
//! Layout: `dirs/INO` lists directory INO's durable entries, one `CHILD KIND PERM UID GID NAME`
//! line each (KIND `f` file, `d` directory, `l` symlink; PERM octal; NAME with bytes outside
//! `!`..`~` and `%` written as `%XX`); `files/INO` holds file INO's durable bytes;
//! `links/INO` symlink INO's target. The root is inode 1. Nothing here is fsynced: it is the
//! durable state of the model, not of the host's disk.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::model::{Body, Dir, Ino, Inode, Meta, ROOT, State};
use crate::pages::{Changed, FileData};

/// The backing directory.
#[derive(Debug)]
pub struct Backing {
    root: PathBuf,
}

const PARTS: [&str; 3] = ["dirs", "files", "links"];

impl Backing {
    /// Opens (or initialises) the backing directory and loads the durable state from it.
    pub fn open(root: &Path) -> Result<(Backing, State), Error> {
        for part in PARTS {
            let p = root.join(part);
            fs::create_dir_all(&p).map_err(Error::io(&p))?;
        }
        let backing = Backing {
            root: root.to_path_buf(),
        };
        let root_list = backing.path("dirs", ROOT);
        let state = if root_list.exists() {
            backing.load()?
        } else {
            let state = State::new();
            backing.write_dir(&state, ROOT)?;
            state
        };
        backing.remove_unknown(&state)?;
        Ok((backing, state))
    }

    fn path(&self, part: &str, ino: Ino) -> PathBuf {
        self.root.join(part).join(ino.to_string())
    }

    fn load(&self) -> Result<State, Error> {
        let mut inodes = HashMap::new();
        let mut todo = vec![(
            ROOT,
            Meta {
                perm: 0o755,
                uid: 0,
                gid: 0,
            },
        )];
        while let Some((ino, meta)) = todo.pop() {
            let path = self.path("dirs", ino);
            let text = fs::read_to_string(&path).map_err(Error::io(&path))?;
            let mut entries = std::collections::BTreeMap::new();
            for line in text.lines() {
                let corrupt = |what: &str| Error::Corrupt {
                    path: path.clone(),
                    what: format!("{what}: {line:?}"),
                };
                let f: Vec<&str> = line.split(' ').collect();
                let [child, kind, perm, uid, gid, name] = f[..] else {
                    return Err(corrupt("not 6 fields"));
                };
                let child: Ino = child.parse().map_err(|_| corrupt("inode"))?;
                let meta = Meta {
                    perm: u16::from_str_radix(perm, 8).map_err(|_| corrupt("perm"))?,
                    uid: uid.parse().map_err(|_| corrupt("uid"))?,
                    gid: gid.parse().map_err(|_| corrupt("gid"))?,
                };
                let name = unescape(name).ok_or_else(|| corrupt("name"))?;
                entries.insert(name, child);
                if inodes.contains_key(&child) || child == ino {
                    continue;
                }
                let body = match kind {
                    "d" => {
                        todo.push((child, meta));
                        continue;
                    }
                    "f" => Body::File(FileData::from_durable(self.read_opt("files", child)?)),
                    "l" => Body::Symlink(self.read_opt("links", child)?),
                    _ => return Err(corrupt("kind")),
                };
                inodes.insert(
                    child,
                    Inode {
                        body,
                        meta,
                        nlink: 0,
                        open: 0,
                    },
                );
            }
            let dir = Dir {
                current: entries.clone(),
                durable: entries,
                parent: ROOT,
            };
            inodes.insert(
                ino,
                Inode {
                    body: Body::Dir(dir),
                    meta,
                    nlink: 0,
                    open: 0,
                },
            );
        }
        Ok(State::from_durable(inodes))
    }

    fn read_opt(&self, part: &str, ino: Ino) -> Result<Vec<u8>, Error> {
        let path = self.path(part, ino);
        match fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io(&path)(e)),
        }
    }

    /// Removes the files of inodes the state does not hold.
    fn remove_unknown(&self, state: &State) -> Result<(), Error> {
        for part in PARTS {
            let dir = self.root.join(part);
            for entry in fs::read_dir(&dir).map_err(Error::io(&dir))? {
                let entry = entry.map_err(Error::io(&dir))?;
                let known = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<Ino>().ok())
                    .is_some_and(|ino| state.get(ino).is_some());
                if !known {
                    let p = entry.path();
                    fs::remove_file(&p).map_err(Error::io(&p))?;
                }
            }
        }
        Ok(())
    }

    /// Writes the changed ranges of a file's durable bytes (and its durable length).
    pub fn write_file(&self, ino: Ino, data: &FileData, changed: &Changed) -> Result<(), Error> {
        let path = self.path("files", ino);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        let durable = data.durable();
        file.set_len(durable.len() as u64)
            .map_err(Error::io(&path))?;
        for range in changed {
            file.seek(SeekFrom::Start(range.start))
                .map_err(Error::io(&path))?;
            file.write_all(&durable[range.start as usize..range.end as usize])
                .map_err(Error::io(&path))?;
        }
        Ok(())
    }

    /// Writes a symlink's target.
    pub fn write_link(&self, ino: Ino, target: &[u8]) -> Result<(), Error> {
        let path = self.path("links", ino);
        fs::write(&path, target).map_err(Error::io(&path))
    }

    /// Writes a directory's durable entries (whole, through a temporary file and a rename).
    pub fn write_dir(&self, state: &State, ino: Ino) -> Result<(), Error> {
        let path = self.path("dirs", ino);
        let Ok(entries) = state.durable_entries(ino) else {
            return Ok(());
        };
        let mut text = String::new();
        for (name, &child) in entries {
            let Some(inode) = state.get(child) else {
                continue;
            };
            let kind = match inode.body {
                Body::File(_) => 'f',
                Body::Dir(_) => 'd',
                Body::Symlink(_) => 'l',
            };
            let m = inode.meta;
            text.push_str(&format!(
                "{child} {kind} {:o} {} {} {}\n",
                m.perm,
                m.uid,
                m.gid,
                escape(name)
            ));
        }
        let tmp = self.root.join("dirs").join(format!("{ino}.tmp"));
        fs::write(&tmp, text).map_err(Error::io(&tmp))?;
        fs::rename(&tmp, &path).map_err(Error::io(&path))
    }

    /// Removes what the backing directory holds for a freed inode.
    pub fn remove(&self, ino: Ino) -> Result<(), Error> {
        for part in PARTS {
            let path = self.path(part, ino);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path)(e)),
            }
        }
        Ok(())
    }
}

fn escape(name: &[u8]) -> String {
    let mut out = String::new();
    for &b in name {
        if (b'!'..=b'~').contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

    #[test]
    fn names_round_trip() {
        for name in [
            &b"plain.txt"[..],
            b"with space",
            b"100%",
            b"new\nline",
            b"\xff\x00",
        ] {
            let e = escape(name);
            assert!(!e.contains(' ') && !e.contains('\n'), "{e}");
            assert_eq!(unescape(&e).as_deref(), Some(name));
        }
        assert_eq!(escape(b"a b%"), "a%20b%25");
        assert_eq!(unescape("%2"), None);
    }
}
