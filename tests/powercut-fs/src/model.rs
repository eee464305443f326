//! The filesystem's state without any IO: inodes, each directory's current and durable
//! entries, each file's page layer ([`FileData`]), and what a sync or a cut does to them.
//!
//! Durable names: `fsyncdir(D)` makes D's current entries its durable entries, with one
//! exception (the rename rule): an old durable entry `D/n -> i` whose inode `i` is still
//! linked in the current view, and that would leave `i` with no durable name reachable from
//! the root, is kept ("deferred") as long as the name `n` is free in D's current view. A
//! deferred entry is dropped at a later `fsyncdir` (of any directory) once `i` has another
//! durable name reachable from the root or is no longer linked anywhere. So a cross-directory
//! rename never durably loses the file: syncing only the target leaves it under both names
//! after a cut; syncing only the source leaves it under its old name.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fuser::Errno;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::pages::{Changed, FileData};

/// Inode number.
pub type Ino = u64;
/// A name in a directory (bytes: Linux names need not be UTF-8).
pub type Name = Vec<u8>;

/// The root directory.
pub const ROOT: Ino = 1;
/// The control file `.powercut` (not part of the model).
pub const CONTROL: Ino = 2;
/// The first inode number given to a created node.
pub const FIRST_INO: Ino = 3;

/// A directory: its entries in the current view and in the durable state.
#[derive(Clone, Debug, Default)]
pub struct Dir {
    /// Entries now.
    pub current: BTreeMap<Name, Ino>,
    /// Entries as of the directory's last sync (what a cut returns to).
    pub durable: BTreeMap<Name, Ino>,
    /// The parent in the current view (the root is its own parent).
    pub parent: Ino,
}

/// What an inode is.
#[derive(Clone, Debug)]
pub enum Body {
    /// A regular file.
    File(FileData),
    /// A directory.
    Dir(Dir),
    /// A symbolic link and its target (immutable, so durable with its name).
    Symlink(Vec<u8>),
}

/// Attributes the model does not make volatile: they change at once and survive cuts.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// One inode.
#[derive(Clone, Debug)]
pub struct Inode {
    /// Content.
    pub body: Body,
    /// Attributes.
    pub meta: Meta,
    /// Names in the current view.
    pub nlink: u32,
    /// Open handles.
    pub open: u32,
}

/// What to create.
#[derive(Clone, Debug)]
pub enum NewNode {
    /// An empty regular file.
    File,
    /// An empty directory.
    Dir,
    /// A symbolic link to the target.
    Symlink(Vec<u8>),
}

/// Counts for the control file's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Dirty pages over all files.
    pub pages: usize,
    /// Files whose data or size differ from their durable state.
    pub files: usize,
    /// Directories whose entries differ from their durable entries.
    pub dirs: usize,
    /// Deferred removals (see the module doc).
    pub deferred: usize,
    /// Inodes held.
    pub inodes: usize,
}

/// What a cut changed, for the backing store.
#[derive(Debug, Default)]
pub struct CutReport {
    /// Files whose durable bytes a torn cut changed.
    pub torn: Vec<(Ino, Changed)>,
    /// Inodes that no longer exist.
    pub removed: Vec<Ino>,
}

/// The whole filesystem.
#[derive(Clone, Debug)]
pub struct State {
    inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    deferred: BTreeSet<(Ino, Name)>,
    freed: Vec<Ino>,
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// An empty filesystem (root only, with permissions 0755).
    pub fn new() -> Self {
        let root = Inode {
            body: Body::Dir(Dir {
                parent: ROOT,
                ..Dir::default()
            }),
            meta: Meta {
                perm: 0o755,
                uid: 0,
                gid: 0,
            },
            nlink: 1,
            open: 0,
        };
        Self {
            inodes: HashMap::from([(ROOT, root)]),
            next_ino: FIRST_INO,
            deferred: BTreeSet::new(),
            freed: Vec::new(),
        }
    }

    /// A filesystem whose durable (and current) state is `inodes` (from the backing store):
    /// unreachable inodes are dropped, link counts and parents recomputed.
    pub fn from_durable(inodes: HashMap<Ino, Inode>) -> Self {
        let next_ino = inodes
            .keys()
            .copied()
            .max()
            .unwrap_or(ROOT)
            .max(FIRST_INO - 1)
            + 1;
        let mut state = Self {
            inodes,
            next_ino,
            deferred: BTreeSet::new(),
            freed: Vec::new(),
        };
        state.rebuild_from_durable();
        state
    }

    /// The inode, if it exists.
    pub fn get(&self, ino: Ino) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    /// The inode, mutably.
    pub fn get_mut(&mut self, ino: Ino) -> Option<&mut Inode> {
        self.inodes.get_mut(&ino)
    }

    /// Every inode number (unordered).
    pub fn inos(&self) -> impl Iterator<Item = Ino> + '_ {
        self.inodes.keys().copied()
    }

    fn dir(&self, ino: Ino) -> Result<&Dir, Errno> {
        match self.inodes.get(&ino).map(|i| &i.body) {
            Some(Body::Dir(dir)) => Ok(dir),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut Dir, Errno> {
        match self.inodes.get_mut(&ino).map(|i| &mut i.body) {
            Some(Body::Dir(dir)) => Ok(dir),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// The file's page layer.
    pub fn file(&self, ino: Ino) -> Result<&FileData, Errno> {
        match self.inodes.get(&ino).map(|i| &i.body) {
            Some(Body::File(f)) => Ok(f),
            Some(Body::Dir(_)) => Err(Errno::EISDIR),
            Some(Body::Symlink(_)) => Err(Errno::EINVAL),
            None => Err(Errno::ENOENT),
        }
    }

    /// The file's page layer, mutably.
    pub fn file_mut(&mut self, ino: Ino) -> Result<&mut FileData, Errno> {
        match self.inodes.get_mut(&ino).map(|i| &mut i.body) {
            Some(Body::File(f)) => Ok(f),
            Some(Body::Dir(_)) => Err(Errno::EISDIR),
            Some(Body::Symlink(_)) => Err(Errno::EINVAL),
            None => Err(Errno::ENOENT),
        }
    }

    /// Current entries of a directory.
    pub fn entries(&self, dir: Ino) -> Result<&BTreeMap<Name, Ino>, Errno> {
        Ok(&self.dir(dir)?.current)
    }

    /// Durable entries of a directory.
    pub fn durable_entries(&self, dir: Ino) -> Result<&BTreeMap<Name, Ino>, Errno> {
        Ok(&self.dir(dir)?.durable)
    }

    /// The current parent of a directory.
    pub fn parent(&self, dir: Ino) -> Result<Ino, Errno> {
        Ok(self.dir(dir)?.parent)
    }

    /// Looks a name up in the current view.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Ino, Errno> {
        self.dir(parent)?
            .current
            .get(name)
            .copied()
            .ok_or(Errno::ENOENT)
    }

    /// Creates a node under `parent` (volatile until `parent` is synced).
    pub fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        node: NewNode,
        meta: Meta,
    ) -> Result<Ino, Errno> {
        check_name(name)?;
        if self.dir(parent)?.current.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let body = match node {
            NewNode::File => Body::File(FileData::default()),
            NewNode::Dir => Body::Dir(Dir {
                parent,
                ..Dir::default()
            }),
            NewNode::Symlink(target) => Body::Symlink(target),
        };
        self.inodes.insert(
            ino,
            Inode {
                body,
                meta,
                nlink: 1,
                open: 0,
            },
        );
        self.dir_mut(parent)?.current.insert(name.to_vec(), ino);
        Ok(ino)
    }

    /// A new name for a non-directory.
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &[u8]) -> Result<(), Errno> {
        check_name(name)?;
        match self.inodes.get(&ino).map(|i| &i.body) {
            Some(Body::Dir(_)) => return Err(Errno::EPERM),
            Some(_) => {}
            None => return Err(Errno::ENOENT),
        }
        if self.dir(parent)?.current.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        self.dir_mut(parent)?.current.insert(name.to_vec(), ino);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.nlink += 1;
        }
        Ok(())
    }

    /// Removes a non-directory name.
    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<Ino, Errno> {
        let ino = self.lookup(parent, name)?;
        if matches!(self.inodes.get(&ino).map(|i| &i.body), Some(Body::Dir(_))) {
            return Err(Errno::EISDIR);
        }
        self.drop_name(parent, name, ino)?;
        Ok(ino)
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<Ino, Errno> {
        let ino = self.lookup(parent, name)?;
        if !self.dir(ino)?.current.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.drop_name(parent, name, ino)?;
        Ok(ino)
    }

    fn drop_name(&mut self, parent: Ino, name: &[u8], ino: Ino) -> Result<(), Errno> {
        self.dir_mut(parent)?.current.remove(name);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.nlink = inode.nlink.saturating_sub(1);
        }
        self.collect(ino);
        Ok(())
    }

    /// Renames (replacing the target unless `noreplace`); volatile until each directory is
    /// synced (see the module doc).
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        noreplace: bool,
    ) -> Result<(), Errno> {
        check_name(new_name)?;
        let ino = self.lookup(parent, name)?;
        self.dir(new_parent)?;
        let moving_dir = matches!(self.inodes.get(&ino).map(|i| &i.body), Some(Body::Dir(_)));
        if moving_dir {
            // Not into itself or its own subtree.
            let mut at = new_parent;
            loop {
                if at == ino {
                    return Err(Errno::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.parent(at)?;
            }
        }
        if let Some(&old) = self.dir(new_parent)?.current.get(new_name) {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(Errno::EEXIST);
            }
            match (moving_dir, self.dir(old)) {
                (true, Ok(target)) if !target.current.is_empty() => return Err(Errno::ENOTEMPTY),
                (true, Ok(_)) => {}
                (true, Err(_)) => return Err(Errno::ENOTDIR),
                (false, Ok(_)) => return Err(Errno::EISDIR),
                (false, Err(_)) => {}
            }
            self.drop_name(new_parent, new_name, old)?;
        }
        self.dir_mut(parent)?.current.remove(name);
        self.dir_mut(new_parent)?
            .current
            .insert(new_name.to_vec(), ino);
        if moving_dir {
            self.dir_mut(ino)?.parent = new_parent;
        }
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its data and size become durable.
    pub fn fsync(&mut self, ino: Ino) -> Result<Changed, Errno> {
        Ok(self.file_mut(ino)?.sync())
    }

    /// `fsyncdir`: the directory's entries become durable (with the rename rule of the module
    /// doc). Returns the directories whose durable entries changed.
    pub fn fsyncdir(&mut self, ino: Ino) -> Result<Vec<Ino>, Errno> {
        let dir = self.dir(ino)?;
        let old = dir.durable.clone();
        let current = dir.current.clone();
        self.dir_mut(ino)?.durable = current.clone();
        let removes = old.iter().any(|(name, i)| current.get(name) != Some(i));
        let names = if removes {
            self.durable_names()
        } else {
            HashMap::new()
        };
        let mut kept = BTreeMap::new();
        for (name, &i) in &old {
            let linked = self.inodes.get(&i).is_some_and(|n| n.nlink > 0);
            if current.get(name) != Some(&i)
                && !current.contains_key(name)
                && linked
                && names.get(&i).copied().unwrap_or(0) == 0
            {
                kept.insert(name.clone(), i);
            }
        }
        for (name, i) in kept {
            self.deferred.insert((ino, name.clone()));
            self.dir_mut(ino)?.durable.insert(name, i);
        }
        let (mut changed, dropped) = self.resolve_deferred();
        changed.push(ino);
        changed.sort_unstable();
        changed.dedup();
        // Inodes that lost a durable name may now be garbage.
        for i in old.into_values().chain(dropped) {
            self.collect(i);
        }
        Ok(changed)
    }

    /// Drops deferred entries that no longer protect anything; returns the directories
    /// whose durable entries changed and the inodes that lost a durable name.
    fn resolve_deferred(&mut self) -> (Vec<Ino>, Vec<Ino>) {
        let mut dropped = Vec::new();
        if self.deferred.is_empty() {
            return (Vec::new(), dropped);
        }
        let names = self.durable_names();
        let reachable = self.durably_reachable();
        let mut changed = Vec::new();
        for (dir, name) in self.deferred.clone() {
            let Ok(d) = self.dir(dir) else {
                self.deferred.remove(&(dir, name));
                continue;
            };
            let Some(&i) = d.durable.get(&name) else {
                self.deferred.remove(&(dir, name));
                continue;
            };
            if d.current.get(&name) == Some(&i) || d.current.contains_key(&name) {
                // Named so again (it stays), or the name was taken (the next sync of the
                // directory decides).
                if d.current.get(&name) == Some(&i) {
                    self.deferred.remove(&(dir, name));
                }
                continue;
            }
            let linked = self.inodes.get(&i).is_some_and(|n| n.nlink > 0);
            let own = u32::from(reachable.contains(&dir));
            let others = names.get(&i).copied().unwrap_or(0).saturating_sub(own);
            if !linked || others > 0 {
                if let Ok(d) = self.dir_mut(dir) {
                    d.durable.remove(&name);
                }
                self.deferred.remove(&(dir, name));
                changed.push(dir);
                dropped.push(i);
            }
        }
        (changed, dropped)
    }

    /// Directories reachable from the root through durable entries.
    fn durably_reachable(&self) -> BTreeSet<Ino> {
        let mut seen = BTreeSet::from([ROOT]);
        let mut todo = vec![ROOT];
        while let Some(d) = todo.pop() {
            if let Ok(dir) = self.dir(d) {
                for &c in dir.durable.values() {
                    if matches!(self.inodes.get(&c).map(|i| &i.body), Some(Body::Dir(_)))
                        && seen.insert(c)
                    {
                        todo.push(c);
                    }
                }
            }
        }
        seen
    }

    /// How many durable names reachable from the root each inode has.
    fn durable_names(&self) -> HashMap<Ino, u32> {
        let mut names = HashMap::new();
        for d in self.durably_reachable() {
            if let Ok(dir) = self.dir(d) {
                for &c in dir.durable.values() {
                    *names.entry(c).or_insert(0) += 1;
                }
            }
        }
        names
    }

    /// Whether any directory's durable entries name the inode (reachable or not).
    fn durably_named(&self, ino: Ino) -> bool {
        self.inodes.values().any(|n| match &n.body {
            Body::Dir(d) => d.durable.values().any(|&c| c == ino),
            _ => false,
        })
    }

    /// Frees an inode that has no current name, no open handle and no durable name.
    pub fn collect(&mut self, ino: Ino) -> bool {
        let Some(inode) = self.inodes.get(&ino) else {
            return false;
        };
        if ino == ROOT || inode.nlink > 0 || inode.open > 0 || self.durably_named(ino) {
            return false;
        }
        self.inodes.remove(&ino);
        self.freed.push(ino);
        true
    }

    /// Inodes freed since the last call (their backing files can go).
    pub fn take_freed(&mut self) -> Vec<Ino> {
        std::mem::take(&mut self.freed)
    }

    /// Cuts the power: every file and directory returns to its durable state; with
    /// `torn = Some(seed)`, each dirty page first survives with probability 1/2 (ChaCha8
    /// seeded with `seed`, files in inode order, pages in offset order). Open handles are
    /// forgotten and unreachable inodes freed.
    pub fn cut(&mut self, torn: Option<u64>) -> CutReport {
        let mut report = CutReport::default();
        let mut rng = torn.map(ChaCha8Rng::seed_from_u64);
        let mut inos: Vec<Ino> = self.inodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let Some(inode) = self.inodes.get_mut(&ino) else {
                continue;
            };
            inode.open = 0;
            match (&mut inode.body, rng.as_mut()) {
                (Body::File(f), Some(rng)) => {
                    let changed = f.cut_torn(&mut || rng.next_u32() & 1 == 1);
                    if !changed.is_empty() {
                        report.torn.push((ino, changed));
                    }
                }
                (Body::File(f), None) => f.cut(),
                (Body::Dir(d), _) => d.current = d.durable.clone(),
                (Body::Symlink(_), _) => {}
            }
        }
        self.deferred.clear();
        report.removed = self.rebuild_from_durable();
        report.torn.retain(|(ino, _)| self.inodes.contains_key(ino));
        report
    }

    /// After the current view was set to the durable one: frees unreachable inodes (returned),
    /// recomputes link counts and directory parents.
    fn rebuild_from_durable(&mut self) -> Vec<Ino> {
        let mut nlink: HashMap<Ino, u32> = HashMap::from([(ROOT, 1)]);
        let mut parent: HashMap<Ino, Ino> = HashMap::from([(ROOT, ROOT)]);
        let mut todo = vec![ROOT];
        while let Some(d) = todo.pop() {
            let Ok(dir) = self.dir(d) else { continue };
            for &c in dir.current.values() {
                let first = !nlink.contains_key(&c);
                *nlink.entry(c).or_insert(0) += 1;
                if first && matches!(self.inodes.get(&c).map(|i| &i.body), Some(Body::Dir(_))) {
                    parent.insert(c, d);
                    todo.push(c);
                }
            }
        }
        let mut removed: Vec<Ino> = self
            .inodes
            .keys()
            .copied()
            .filter(|i| !nlink.contains_key(i))
            .collect();
        removed.sort_unstable();
        for ino in &removed {
            self.inodes.remove(ino);
        }
        // Entries naming inodes that do not exist (a damaged backing store) are dropped.
        let known: BTreeSet<Ino> = self.inodes.keys().copied().collect();
        for (&ino, inode) in &mut self.inodes {
            inode.nlink = nlink.get(&ino).copied().unwrap_or(0);
            if let Body::Dir(d) = &mut inode.body {
                d.current.retain(|_, c| known.contains(c));
                d.durable.retain(|_, c| known.contains(c));
                d.parent = parent.get(&ino).copied().unwrap_or(ROOT);
            }
        }
        removed
    }

    /// Counts of pending (volatile) state.
    pub fn pending(&self) -> Pending {
        let mut p = Pending {
            deferred: self.deferred.len(),
            inodes: self.inodes.len(),
            ..Pending::default()
        };
        for inode in self.inodes.values() {
            match &inode.body {
                Body::File(f) => {
                    p.pages += f.pending_pages();
                    p.files += usize::from(f.is_pending());
                }
                Body::Dir(d) => p.dirs += usize::from(d.current != d.durable),
                Body::Symlink(_) => {}
            }
        }
        p
    }
}

fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
