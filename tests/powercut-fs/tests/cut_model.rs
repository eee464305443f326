//! Property test: the inode/page model against an independent, naive one of "what survives a
//! cut" — whole byte vectors per file (current and durable copies, no pages), and names as one
//! flat map `(dir, name) -> file` per view — over random sequences of creates, writes,
//! truncations, fsyncs, directory syncs, renames (also across directories), unlinks and plain
//! cuts in two directories (the root and a synced `d`). Torn cuts are covered by the table
//! and mounted tests.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use statestore_powercut_fs::model::{Body, Ino, Meta, NewNode, ROOT, State};

const NAMES: [&str; 3] = ["a", "b", "c"];
const META: Meta = Meta {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

#[derive(Clone, Debug)]
enum Op {
    Create(usize, usize),
    Write(usize, usize, u64, usize, u8),
    Truncate(usize, usize, u64),
    Fsync(usize, usize),
    SyncDir(usize),
    Rename(usize, usize, usize, usize),
    Unlink(usize, usize),
    Cut,
}

fn op() -> impl Strategy<Value = Op> {
    let at = (0..2usize, 0..NAMES.len());
    prop_oneof![
        2 => at.clone().prop_map(|(d, n)| Op::Create(d, n)),
        4 => (at.clone(), 0..(3 * 4096 + 100u64), 1..(2 * 4096usize), any::<u8>())
            .prop_map(|((d, n), off, len, b)| Op::Write(d, n, off, len, b | 1)),
        1 => (at.clone(), 0..(4 * 4096u64)).prop_map(|((d, n), size)| Op::Truncate(d, n, size)),
        2 => at.clone().prop_map(|(d, n)| Op::Fsync(d, n)),
        2 => (0..2usize).prop_map(Op::SyncDir),
        2 => (at.clone(), at.clone()).prop_map(|((d, n), (e, m))| Op::Rename(d, n, e, m)),
        1 => at.prop_map(|(d, n)| Op::Unlink(d, n)),
        1 => Just(Op::Cut),
    ]
}

/// The naive model.
#[derive(Default)]
struct Naive {
    current: Vec<Vec<u8>>,
    durable: Vec<Vec<u8>>,
    cur: BTreeMap<(usize, usize), usize>,
    dur: BTreeMap<(usize, usize), usize>,
    deferred: BTreeSet<(usize, usize)>,
}

impl Naive {
    fn linked(&self, file: usize) -> bool {
        self.cur.values().any(|&f| f == file)
    }

    fn durable_names(&self, file: usize) -> usize {
        self.dur.values().filter(|&&f| f == file).count()
    }

    fn sync_dir(&mut self, d: usize) {
        let old: Vec<((usize, usize), usize)> = self
            .dur
            .iter()
            .filter(|((dd, _), _)| *dd == d)
            .map(|(k, v)| (*k, *v))
            .collect();
        self.dur.retain(|(dd, _), _| *dd != d);
        for (k, v) in &self.cur {
            if k.0 == d {
                self.dur.insert(*k, *v);
            }
        }
        for (key, file) in old {
            if !self.cur.contains_key(&key) && self.linked(file) && self.durable_names(file) == 0 {
                self.dur.insert(key, file);
                self.deferred.insert(key);
            }
        }
        for key in self.deferred.clone() {
            let Some(&file) = self.dur.get(&key) else {
                self.deferred.remove(&key);
                continue;
            };
            match self.cur.get(&key) {
                Some(&f) if f == file => {
                    self.deferred.remove(&key);
                }
                Some(_) => {}
                None => {
                    if !self.linked(file) || self.durable_names(file) > 1 {
                        self.dur.remove(&key);
                        self.deferred.remove(&key);
                    }
                }
            }
        }
    }

    fn apply(&mut self, op: &Op) -> bool {
        match *op {
            Op::Create(d, n) => {
                if self.cur.contains_key(&(d, n)) {
                    return false;
                }
                self.current.push(Vec::new());
                self.durable.push(Vec::new());
                self.cur.insert((d, n), self.current.len() - 1);
            }
            Op::Write(d, n, off, len, b) => {
                let Some(&f) = self.cur.get(&(d, n)) else {
                    return false;
                };
                let data = &mut self.current[f];
                let end = off as usize + len;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off as usize..end].fill(b);
            }
            Op::Truncate(d, n, size) => {
                let Some(&f) = self.cur.get(&(d, n)) else {
                    return false;
                };
                self.current[f].resize(size as usize, 0);
            }
            Op::Fsync(d, n) => {
                let Some(&f) = self.cur.get(&(d, n)) else {
                    return false;
                };
                self.durable[f] = self.current[f].clone();
            }
            Op::SyncDir(d) => self.sync_dir(d),
            Op::Rename(d, n, e, m) => {
                let Some(&f) = self.cur.get(&(d, n)) else {
                    return false;
                };
                // POSIX: two names of one file: rename does nothing.
                if self.cur.get(&(e, m)) != Some(&f) {
                    self.cur.remove(&(d, n));
                    self.cur.insert((e, m), f);
                }
            }
            Op::Unlink(d, n) => {
                if self.cur.remove(&(d, n)).is_none() {
                    return false;
                }
            }
            Op::Cut => {
                self.current = self.durable.clone();
                self.cur = self.dur.clone();
                self.deferred.clear();
            }
        }
        true
    }

    fn view(&self) -> BTreeMap<(usize, usize), Vec<u8>> {
        self.cur
            .iter()
            .map(|(k, &f)| (*k, self.current[f].clone()))
            .collect()
    }
}

struct Real {
    state: State,
    d: Ino,
}

impl Real {
    fn new() -> Self {
        let mut state = State::new();
        let d = state
            .create(ROOT, b"d", NewNode::Dir, META)
            .expect("mkdir d");
        state.fsyncdir(ROOT).expect("sync root");
        Real { state, d }
    }

    fn dir(&self, i: usize) -> Ino {
        if i == 0 { ROOT } else { self.d }
    }

    fn file(&self, d: usize, n: usize) -> Option<Ino> {
        self.state.lookup(self.dir(d), NAMES[n].as_bytes()).ok()
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Create(d, n) => {
                self.state
                    .create(self.dir(d), NAMES[n].as_bytes(), NewNode::File, META)
                    .expect("create");
            }
            Op::Write(d, n, off, len, b) => {
                let ino = self.file(d, n).expect("file");
                self.state
                    .file_mut(ino)
                    .expect("file")
                    .write(off, &vec![b; len]);
            }
            Op::Truncate(d, n, size) => {
                let ino = self.file(d, n).expect("file");
                self.state.file_mut(ino).expect("file").set_size(size);
            }
            Op::Fsync(d, n) => {
                let ino = self.file(d, n).expect("file");
                self.state.fsync(ino).expect("fsync");
            }
            Op::SyncDir(d) => {
                self.state.fsyncdir(self.dir(d)).expect("fsyncdir");
            }
            Op::Rename(d, n, e, m) => {
                let (from, to) = (self.dir(d), self.dir(e));
                self.state
                    .rename(from, NAMES[n].as_bytes(), to, NAMES[m].as_bytes(), false)
                    .expect("rename");
            }
            Op::Unlink(d, n) => {
                self.state
                    .unlink(self.dir(d), NAMES[n].as_bytes())
                    .expect("unlink");
            }
            Op::Cut => {
                self.state.cut(None);
            }
        }
    }

    fn view(&self) -> BTreeMap<(usize, usize), Vec<u8>> {
        let mut out = BTreeMap::new();
        for d in 0..2 {
            for (name, &ino) in self.state.entries(self.dir(d)).expect("dir") {
                let Some(n) = NAMES.iter().position(|x| x.as_bytes() == name.as_slice()) else {
                    assert!(d == 0 && name == b"d", "unexpected entry {name:?}");
                    continue;
                };
                let Some(Body::File(f)) = self.state.get(ino).map(|i| &i.body) else {
                    panic!("{name:?} is not a file");
                };
                out.insert((d, n), f.read(0, u64::MAX));
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn model_matches_the_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut naive = Naive::default();
        let mut real = Real::new();
        for (step, op) in ops.iter().enumerate() {
            // Ops that do not apply (no such file, name taken) are skipped by both.
            if !naive.apply(op) {
                continue;
            }
            real.apply(op);
            prop_assert!(real.view() == naive.view(), "step {} ({:?}): views differ", step, op);
        }
        naive.apply(&Op::Cut);
        real.apply(&Op::Cut);
        prop_assert!(real.view() == naive.view(), "after the final cut");
    }
}
