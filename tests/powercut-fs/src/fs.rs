//! The FUSE glue: each `fuser` operation on the [`State`], the control file, open handles,
//! and the backing directory's write-out after syncs and cuts.
//!
//! Every file is opened with `FOPEN_DIRECT_IO` and every entry and attribute is answered
//! with a zero TTL, so the kernel keeps no page cache and no attributes of its own: every
//! read, write and `stat` reaches this process, and after a cut the view is exactly the
//! durable state. (Shared writable `mmap` is therefore not supported.) File locks (`fcntl`,
//! `flock`) are not negotiated with the kernel (no `FUSE_POSIX_LOCKS`/`FUSE_FLOCK_LOCKS`), so
//! the kernel implements them locally on the mount, which is what a single-host test needs.
//! Timestamps are kept in memory only and are not part of the durability model.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::backing::Backing;
use crate::control::{self, Command};
use crate::error::Error;
use crate::model::{Body, CONTROL, Ino, Meta, NewNode, ROOT, State};

/// The kernel caches nothing (see the module doc).
const TTL: Duration = Duration::ZERO;
/// `S_IFMT` and `S_IFREG` of `mknod`'s mode.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
/// `O_DSYNC` (also part of `O_SYNC`) among a write's file flags.
const O_DSYNC: i32 = 0o10_000;
/// `fallocate`'s `FALLOC_FL_KEEP_SIZE`.
const FALLOC_FL_KEEP_SIZE: i32 = 1;

/// Told to `main` when the kernel ends the session (an unmount from outside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// SIGTERM or SIGINT arrived.
    Signal,
    /// The session ended (the filesystem was unmounted).
    Ended,
}

enum Handle {
    File(Ino),
    Dir(Vec<(Ino, FileType, Vec<u8>)>),
    Control(Vec<u8>),
}

#[derive(Clone, Copy)]
struct Times {
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

struct Inner {
    state: State,
    backing: Backing,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    cuts: u64,
    times: HashMap<Ino, Times>,
    started: SystemTime,
}

/// The filesystem served over FUSE.
pub struct PowercutFs {
    inner: Mutex<Inner>,
    events: Sender<Event>,
}

impl PowercutFs {
    /// Serves `state` (loaded from `backing`); tells `events` when the session ends.
    pub fn new(state: State, backing: Backing, events: Sender<Event>) -> Self {
        let inner = Inner {
            state,
            backing,
            handles: HashMap::new(),
            next_fh: 1,
            cuts: 0,
            times: HashMap::new(),
            started: SystemTime::now(),
        };
        Self {
            inner: Mutex::new(inner),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn io_error(e: Error) -> Errno {
    eprintln!("powercut-fs: backing directory: {e}");
    Errno::EIO
}

fn is_control(parent: INodeNo, name: &OsStr) -> bool {
    parent.0 == ROOT && name.as_bytes() == control::NAME.as_bytes()
}

impl Inner {
    fn attr(&self, ino: Ino) -> Result<FileAttr, Errno> {
        let t = self.times.get(&ino).copied().unwrap_or(Times {
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
        });
        let (kind, size, perm, nlink, uid, gid) = if ino == CONTROL {
            (FileType::RegularFile, 0, 0o600, 1, 0, 0)
        } else {
            let inode = self.state.get(ino).ok_or(Errno::ENOENT)?;
            let m = inode.meta;
            match &inode.body {
                Body::File(f) => (
                    FileType::RegularFile,
                    f.size(),
                    m.perm,
                    inode.nlink,
                    m.uid,
                    m.gid,
                ),
                Body::Dir(_) => (FileType::Directory, 4096, m.perm, 2, m.uid, m.gid),
                Body::Symlink(t) => (
                    FileType::Symlink,
                    t.len() as u64,
                    m.perm,
                    inode.nlink,
                    m.uid,
                    m.gid,
                ),
            }
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: t.atime,
            mtime: t.mtime,
            ctime: t.ctime,
            crtime: t.ctime,
            kind,
            perm,
            nlink,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn touch(&mut self, ino: Ino) {
        let now = SystemTime::now();
        let t = self.times.entry(ino).or_insert(Times {
            atime: now,
            mtime: now,
            ctime: now,
        });
        t.mtime = now;
        t.ctime = now;
    }

    fn handle(&mut self, handle: Handle) -> FileHandle {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, handle);
        FileHandle(fh)
    }

    /// The file a handle opened, or EIO for a handle a cut invalidated.
    fn file_handle(&self, fh: FileHandle, ino: INodeNo) -> Result<Ino, Errno> {
        match self.handles.get(&fh.0) {
            Some(Handle::File(i)) if *i == ino.0 => Ok(*i),
            _ => Err(Errno::EIO),
        }
    }

    /// Removes the backing files of inodes the state freed.
    fn reap(&mut self) -> Result<(), Errno> {
        for ino in self.state.take_freed() {
            self.times.remove(&ino);
            self.backing.remove(ino).map_err(io_error)?;
        }
        Ok(())
    }

    fn create(
        &mut self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        node: NewNode,
        mode: u32,
        umask: u32,
    ) -> Result<Ino, Errno> {
        if is_control(parent, name) {
            return Err(Errno::EEXIST);
        }
        let target = match &node {
            NewNode::Symlink(t) => Some(t.clone()),
            _ => None,
        };
        let meta = Meta {
            perm: (mode & !umask & 0o7777) as u16,
            uid: req.uid(),
            gid: req.gid(),
        };
        let ino = self.state.create(parent.0, name.as_bytes(), node, meta)?;
        if let Some(target) = target {
            self.backing.write_link(ino, &target).map_err(io_error)?;
        }
        self.touch(ino);
        self.touch(parent.0);
        Ok(ino)
    }

    fn cut(&mut self, command: Command) -> Result<(), Errno> {
        let seed = match command {
            Command::Cut => None,
            Command::CutTorn(seed) => Some(seed),
        };
        let report = self.state.cut(seed);
        for (ino, changed) in &report.torn {
            if let Ok(f) = self.state.file(*ino) {
                self.backing
                    .write_file(*ino, f, changed)
                    .map_err(io_error)?;
            }
        }
        for ino in &report.removed {
            self.times.remove(ino);
            self.backing.remove(*ino).map_err(io_error)?;
        }
        self.handles.retain(|_, h| matches!(h, Handle::Control(_)));
        self.cuts += 1;
        Ok(())
    }

    fn status(&self) -> Vec<u8> {
        control::status(self.cuts, self.state.pending()).into_bytes()
    }
}

fn entry(reply: ReplyEntry, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for PowercutFs {
    fn destroy(&mut self) {
        // main may already be gone (it unmounted after a signal).
        let _ = self.events.send(Event::Ended);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let inner = self.lock();
        if is_control(parent, name) {
            return entry(reply, inner.attr(CONTROL));
        }
        entry(
            reply,
            inner
                .state
                .lookup(parent.0, name.as_bytes())
                .and_then(|ino| inner.attr(ino)),
        );
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lock().attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            if ino.0 == CONTROL {
                // `echo cut > .powercut` truncates first: nothing to do.
                return inner.attr(CONTROL);
            }
            if let Some(size) = size {
                inner.state.file_mut(ino.0)?.set_size(size);
                inner.touch(ino.0);
            }
            let inode = inner.state.get_mut(ino.0).ok_or(Errno::ENOENT)?;
            if let Some(mode) = mode {
                inode.meta.perm = (mode & 0o7777) as u16;
            }
            if let Some(uid) = uid {
                inode.meta.uid = uid;
            }
            if let Some(gid) = gid {
                inode.meta.gid = gid;
            }
            if atime.is_some() || mtime.is_some() {
                let started = inner.started;
                let t = inner.times.entry(ino.0).or_insert(Times {
                    atime: started,
                    mtime: started,
                    ctime: started,
                });
                let at = |v: TimeOrNow| match v {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
                if let Some(a) = atime {
                    t.atime = at(a);
                }
                if let Some(m) = mtime {
                    t.mtime = at(m);
                }
            }
            inner.attr(ino.0)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.lock().state.get(ino.0).map(|i| &i.body) {
            Some(Body::Symlink(target)) => reply.data(target),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let mut inner = self.lock();
        let r = inner
            .create(req, parent, name, NewNode::File, mode, umask)
            .and_then(|ino| inner.attr(ino));
        entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut inner = self.lock();
        let r = inner
            .create(req, parent, name, NewNode::Dir, mode, umask)
            .and_then(|ino| inner.attr(ino));
        entry(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut inner = self.lock();
        let node = NewNode::Symlink(target.as_os_str().as_bytes().to_vec());
        let r = inner
            .create(req, parent, link_name, node, 0o777, 0)
            .and_then(|ino| inner.attr(ino));
        entry(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut inner = self.lock();
        if is_control(newparent, newname) || ino.0 == CONTROL {
            return reply.error(Errno::EPERM);
        }
        let r = inner
            .state
            .link(ino.0, newparent.0, newname.as_bytes())
            .and_then(|()| inner.attr(ino.0));
        entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.lock();
        if is_control(parent, name) {
            return reply.error(Errno::EPERM);
        }
        let r = inner.state.unlink(parent.0, name.as_bytes()).map(|_| ());
        inner.touch(parent.0);
        empty(reply, r.and_then(|()| inner.reap()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.lock();
        let r = inner.state.rmdir(parent.0, name.as_bytes()).map(|_| ());
        inner.touch(parent.0);
        empty(reply, r.and_then(|()| inner.reap()));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        if is_control(parent, name) || is_control(newparent, newname) {
            return reply.error(Errno::EPERM);
        }
        let mut inner = self.lock();
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let r = inner.state.rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            noreplace,
        );
        inner.touch(parent.0);
        inner.touch(newparent.0);
        empty(reply, r.and_then(|()| inner.reap()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut inner = self.lock();
        if ino.0 == CONTROL {
            let status = inner.status();
            let fh = inner.handle(Handle::Control(status));
            return reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
        }
        if let Err(e) = inner.state.file(ino.0) {
            return reply.error(e);
        }
        if let Some(inode) = inner.state.get_mut(ino.0) {
            inode.open += 1;
        }
        let fh = inner.handle(Handle::File(ino.0));
        reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut inner = self.lock();
        let r = inner
            .create(req, parent, name, NewNode::File, mode, umask)
            .and_then(|ino| inner.attr(ino));
        match r {
            Ok(attr) => {
                if let Some(inode) = inner.state.get_mut(attr.ino.0) {
                    inode.open += 1;
                }
                let fh = inner.handle(Handle::File(attr.ino.0));
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let inner = self.lock();
        if let Some(Handle::Control(status)) = inner.handles.get(&fh.0) {
            let start = (offset as usize).min(status.len());
            let end = start.saturating_add(size as usize).min(status.len());
            return reply.data(&status[start..end]);
        }
        let r = inner.file_handle(fh, ino).and_then(|i| inner.state.file(i));
        match r {
            Ok(f) => reply.data(&f.read(offset, u64::from(size))),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut inner = self.lock();
        if ino.0 == CONTROL {
            let r = match control::parse(data) {
                Some(command) => inner.cut(command),
                None => Err(Errno::EINVAL),
            };
            return match r {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(e),
            };
        }
        let r = (|| {
            let i = inner.file_handle(fh, ino)?;
            inner.state.file_mut(i)?.write(offset, data);
            inner.touch(i);
            if flags.0 & O_DSYNC != 0 {
                // The kernel sends no fsync for O_SYNC/O_DSYNC writes under direct IO.
                let changed = inner.state.fsync(i)?;
                let f = inner.state.file(i)?;
                inner.backing.write_file(i, f, &changed).map_err(io_error)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        if let Some(Handle::File(ino)) = inner.handles.remove(&fh.0) {
            if let Some(inode) = inner.state.get_mut(ino) {
                inode.open = inode.open.saturating_sub(1);
            }
            inner.state.collect(ino);
        }
        let r = inner.reap();
        empty(reply, r);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        if ino.0 == CONTROL {
            return reply.ok();
        }
        let r = (|| {
            let i = inner.file_handle(fh, ino)?;
            let changed = inner.state.fsync(i)?;
            let f = inner.state.file(i)?;
            inner.backing.write_file(i, f, &changed).map_err(io_error)
        })();
        empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut inner = self.lock();
        let listing = (|| {
            let entries = inner.state.entries(ino.0)?;
            let parent = inner.state.parent(ino.0)?;
            let mut list = vec![
                (ino.0, FileType::Directory, b".".to_vec()),
                (parent, FileType::Directory, b"..".to_vec()),
            ];
            for (name, &child) in entries {
                let kind = match inner.state.get(child).map(|i| &i.body) {
                    Some(Body::Dir(_)) => FileType::Directory,
                    Some(Body::Symlink(_)) => FileType::Symlink,
                    _ => FileType::RegularFile,
                };
                list.push((child, kind, name.clone()));
            }
            Ok(list)
        })();
        match listing {
            Ok(list) => {
                let fh = inner.handle(Handle::Dir(list));
                reply.opened(fh, FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let inner = self.lock();
        let Some(Handle::Dir(list)) = inner.handles.get(&fh.0) else {
            return reply.error(Errno::EIO);
        };
        for (i, (child, kind, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(*child),
                (i + 1) as u64,
                *kind,
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        let r = (|| {
            let changed = inner.state.fsyncdir(ino.0)?;
            for dir in changed {
                inner
                    .backing
                    .write_dir(&inner.state, dir)
                    .map_err(io_error)?;
            }
            inner.reap()
        })();
        empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = 1 << 24;
        reply.statfs(blocks, blocks, blocks, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // ENOSYS once: the kernel stops asking (e.g. for security.capability on every write)
        // and answers EOPNOTSUPP itself.
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        let r = (|| {
            let i = inner.file_handle(fh, ino)?;
            match mode {
                0 => {
                    let f = inner.state.file_mut(i)?;
                    let end = offset.saturating_add(length);
                    if end > f.size() {
                        f.set_size(end);
                    }
                    inner.touch(i);
                    Ok(())
                }
                FALLOC_FL_KEEP_SIZE => Ok(()),
                _ => Err(Errno::EOPNOTSUPP),
            }
        })();
        empty(reply, r);
    }
}
