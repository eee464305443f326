//! Table tests of the namespace model: `testdata/namespace.txt` (operations on paths, then
//! the whole tree they leave), plus the pending counts.

use super::{Body, Meta, NewNode, ROOT, State};

const CASES: &str = include_str!("../../testdata/namespace.txt");
const BASE: &str = "mkdir d, create f, write f 3 a, fsync f, syncdir /, syncdir d";
const META: Meta = Meta {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn resolve(state: &State, path: &str) -> u64 {
    path.split('/')
        .filter(|p| !p.is_empty())
        .fold(ROOT, |at, part| {
            state
                .lookup(at, part.as_bytes())
                .expect("path in namespace.txt")
        })
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn apply(state: &mut State, op: &str) {
    let w: Vec<&str> = op.split_whitespace().collect();
    let parent_of = |state: &State, p: &str| {
        let (dir, name) = split(p);
        (resolve(state, dir), name.as_bytes().to_vec())
    };
    match w[..] {
        ["create", p] | ["mkdir", p] => {
            let (dir, name) = parent_of(state, p);
            let node = if w[0] == "create" {
                NewNode::File
            } else {
                NewNode::Dir
            };
            state.create(dir, &name, node, META).expect("create");
        }
        ["write", p, len, c] => {
            let ino = resolve(state, p);
            let len: usize = len.parse().expect("length");
            state
                .file_mut(ino)
                .expect("file")
                .write(0, &vec![c.as_bytes()[0]; len]);
        }
        ["fsync", p] => {
            let ino = resolve(state, p);
            state.fsync(ino).expect("fsync");
        }
        ["syncdir", p] => {
            let ino = resolve(state, p);
            state.fsyncdir(ino).expect("fsyncdir");
        }
        ["mv", from, to] => {
            let (a, n) = parent_of(state, from);
            let (b, m) = parent_of(state, to);
            state.rename(a, &n, b, &m, false).expect("rename");
        }
        ["ln", from, to] => {
            let ino = resolve(state, from);
            let (b, m) = parent_of(state, to);
            state.link(ino, b, &m).expect("link");
        }
        ["rm", p] => {
            let (dir, name) = parent_of(state, p);
            state.unlink(dir, &name).expect("unlink");
        }
        ["rmdir", p] => {
            let (dir, name) = parent_of(state, p);
            state.rmdir(dir, &name).expect("rmdir");
        }
        ["cut"] => {
            state.cut(None);
        }
        ["torn", seed] => {
            state.cut(Some(seed.parse().expect("seed")));
        }
        _ => panic!("unknown operation {op:?} in namespace.txt"),
    }
}

/// `P/` and `P=RUNS` for every path, sorted.
pub(crate) fn tree(state: &State) -> String {
    fn walk(state: &State, dir: u64, prefix: &str, out: &mut Vec<String>) {
        for (name, &ino) in state.entries(dir).expect("dir") {
            let path = format!("{prefix}{}", String::from_utf8_lossy(name));
            match &state.get(ino).expect("inode").body {
                Body::Dir(_) => {
                    out.push(format!("{path}/"));
                    walk(state, ino, &format!("{path}/"), out);
                }
                Body::File(f) => out.push(format!("{path}={}", runs(&f.read(0, u64::MAX)))),
                Body::Symlink(t) => out.push(format!("{path}@{}", String::from_utf8_lossy(t))),
            }
        }
    }
    let mut out = Vec::new();
    walk(state, ROOT, "", &mut out);
    out.sort();
    if out.is_empty() {
        "(empty)".into()
    } else {
        out.join(" ")
    }
}

fn runs(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let j = bytes[i..]
            .iter()
            .position(|&b| b != bytes[i])
            .map_or(bytes.len(), |k| i + k);
        let c = if bytes[i] == 0 {
            '0'
        } else {
            char::from(bytes[i])
        };
        out.push(format!("{c}:{}", j - i));
        i = j;
    }
    out.join(" ")
}

#[test]
fn namespace_table() {
    let mut ran = 0;
    for line in CASES
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split(';').map(str::trim).collect();
        let [name, ops, want] = fields[..] else {
            panic!("malformed line in namespace.txt: {line}");
        };
        let ops = ops.replace("@base", BASE);
        let mut state = State::new();
        for op in ops.split(',') {
            apply(&mut state, op.trim());
        }
        let mut want: Vec<&str> = want.split_whitespace().collect();
        want.sort_unstable();
        let want = if want == ["(empty)"] {
            "(empty)".to_string()
        } else {
            want.join(" ")
        };
        assert_eq!(tree(&state), want, "{name}");
        ran += 1;
    }
    assert!(ran >= 25, "namespace.txt has {ran} cases");
}

#[test]
fn pending_counts_and_garbage() {
    let mut state = State::new();
    let f = state
        .create(ROOT, b"f", NewNode::File, META)
        .expect("create");
    state.file_mut(f).expect("file").write(0, &[1; 5000]);
    let p = state.pending();
    assert_eq!((p.pages, p.files, p.dirs, p.inodes), (2, 1, 1, 2));
    state.fsync(f).expect("fsync");
    state.fsyncdir(ROOT).expect("fsyncdir");
    assert_eq!(state.pending().pages, 0);
    assert_eq!(state.pending().dirs, 0);
    // Unlinked and synced: freed at once (no handle is open).
    state.unlink(ROOT, b"f").expect("unlink");
    assert!(state.get(f).is_some(), "still durably named");
    state.fsyncdir(ROOT).expect("fsyncdir");
    assert!(state.get(f).is_none());
    assert_eq!(state.take_freed(), vec![f]);
}

#[test]
fn errors() {
    let mut state = State::new();
    let d = state.create(ROOT, b"d", NewNode::Dir, META).expect("mkdir");
    state.create(d, b"x", NewNode::File, META).expect("create");
    assert_eq!(
        state.create(ROOT, b"d", NewNode::File, META),
        Err(fuser::Errno::EEXIST)
    );
    assert_eq!(state.rmdir(ROOT, b"d"), Err(fuser::Errno::ENOTEMPTY));
    assert_eq!(state.unlink(ROOT, b"d"), Err(fuser::Errno::EISDIR));
    assert_eq!(
        state.rename(ROOT, b"d", d, b"inner", false),
        Err(fuser::Errno::EINVAL)
    );
    assert_eq!(state.lookup(ROOT, b"nope"), Err(fuser::Errno::ENOENT));
    assert_eq!(
        state.create(ROOT, b"a/b", NewNode::File, META),
        Err(fuser::Errno::EINVAL)
    );
}
