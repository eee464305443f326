//! The page layer of one regular file: its durable bytes and, over them, the volatile pages
//! and size that writes and truncations made since the file's last `fsync`.
//!
//! The view a reader sees is: for each 4 KiB page, the dirty copy if there is one, else the
//! durable bytes — but durable bytes at or past `base_limit` (the smallest size the file had
//! since its last sync) read as zeros, because a truncation below them erased them from the
//! view — all clipped to the current size. Invariant: bytes of a dirty page past the current
//! size are zero, and `base_limit <= min(size, durable.len())`.

use std::collections::BTreeMap;
use std::ops::Range;

/// The page size of the volatile layer (and of torn cuts).
pub const PAGE: u64 = 4096;

/// One file's durable content plus its pending (volatile) pages and size.
#[derive(Clone, Debug, Default)]
pub struct FileData {
    durable: Vec<u8>,
    base_limit: u64,
    dirty: BTreeMap<u64, Vec<u8>>,
    size: u64,
}

/// Byte ranges of the durable content that a sync or torn cut changed (the durable length is
/// [`FileData::durable`]`.len()` afterwards; bytes it grew by are zeros unless listed).
pub type Changed = Vec<Range<u64>>;

impl FileData {
    /// A file whose durable and current content are `durable`.
    pub fn from_durable(durable: Vec<u8>) -> Self {
        let size = durable.len() as u64;
        Self {
            durable,
            base_limit: size,
            dirty: BTreeMap::new(),
            size,
        }
    }

    /// The current (volatile) size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The durable content (what survives a plain cut).
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Pages written since the last sync.
    pub fn pending_pages(&self) -> usize {
        self.dirty.len()
    }

    /// Whether anything (a page or the size) differs from the durable state.
    pub fn is_pending(&self) -> bool {
        !self.dirty.is_empty()
            || self.size != self.durable.len() as u64
            || self.base_limit < self.durable.len() as u64
    }

    /// The current content of page `idx` (a full page, zeros past the current size).
    fn page(&self, idx: u64) -> Vec<u8> {
        if let Some(page) = self.dirty.get(&idx) {
            return page.clone();
        }
        let mut page = vec![0u8; PAGE as usize];
        let start = idx * PAGE;
        let limit = self
            .base_limit
            .min(self.durable.len() as u64)
            .min(self.size);
        if start < limit {
            let end = (start + PAGE).min(limit);
            page[..(end - start) as usize]
                .copy_from_slice(&self.durable[start as usize..end as usize]);
        }
        page
    }

    /// Reads up to `len` bytes at `offset` of the current view (short at the end of file).
    pub fn read(&self, offset: u64, len: u64) -> Vec<u8> {
        let end = offset.saturating_add(len).min(self.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let idx = pos / PAGE;
            let in_page = pos % PAGE;
            let take = (PAGE - in_page).min(end - pos);
            match self.dirty.get(&idx) {
                Some(page) => {
                    out.extend_from_slice(&page[in_page as usize..(in_page + take) as usize])
                }
                None => {
                    let page = self.page(idx);
                    out.extend_from_slice(&page[in_page as usize..(in_page + take) as usize]);
                }
            }
            pos += take;
        }
        out
    }

    /// Writes `data` at `offset` into the volatile layer (growing the current size).
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let idx = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let take = (PAGE as usize - in_page).min(rest.len());
            if !self.dirty.contains_key(&idx) {
                let page = self.page(idx);
                self.dirty.insert(idx, page);
            }
            if let Some(page) = self.dirty.get_mut(&idx) {
                page[in_page..in_page + take].copy_from_slice(&rest[..take]);
            }
            rest = &rest[take..];
            pos += take as u64;
        }
        self.size = self.size.max(pos);
    }

    /// Sets the current size (truncate or extend with zeros), volatile until the next sync.
    pub fn set_size(&mut self, new: u64) {
        if new < self.size {
            let first_gone = new.div_ceil(PAGE);
            self.dirty.retain(|&idx, _| idx < first_gone);
            if !new.is_multiple_of(PAGE)
                && let Some(page) = self.dirty.get_mut(&(new / PAGE))
            {
                page[(new % PAGE) as usize..].fill(0);
            }
            self.base_limit = self.base_limit.min(new);
        }
        self.size = new;
    }

    /// `fsync`/`fdatasync`: the current view becomes durable (data and size).
    pub fn sync(&mut self) -> Changed {
        let mut changed = Vec::new();
        let old_len = self.durable.len() as u64;
        let zero_to = old_len.min(self.size);
        if self.base_limit < zero_to {
            self.durable[self.base_limit as usize..zero_to as usize].fill(0);
            changed.push(self.base_limit..zero_to);
        }
        self.durable.resize(self.size as usize, 0);
        for (&idx, page) in &self.dirty {
            let start = idx * PAGE;
            let end = (start + PAGE).min(self.size);
            if start < end {
                self.durable[start as usize..end as usize]
                    .copy_from_slice(&page[..(end - start) as usize]);
                changed.push(start..end);
            }
        }
        self.dirty.clear();
        self.base_limit = self.size;
        changed
    }

    /// A torn cut: each dirty page (in offset order) for which `survives()` is true is written
    /// whole into the durable content; the durable size grows to cover surviving pages past it
    /// (never past the current size) and never shrinks. Then the volatile layer is dropped.
    pub fn cut_torn(&mut self, survives: &mut dyn FnMut() -> bool) -> Changed {
        let mut changed = Vec::new();
        let old_len = self.durable.len() as u64;
        let mut kept = Vec::new();
        for &idx in self.dirty.keys() {
            if survives() {
                kept.push(idx);
            }
        }
        let new_len = kept
            .iter()
            .map(|&idx| ((idx + 1) * PAGE).min(self.size))
            .fold(old_len, u64::max);
        self.durable.resize(new_len as usize, 0);
        for idx in kept {
            let start = idx * PAGE;
            let end = (start + PAGE).min(new_len);
            if start < end
                && let Some(page) = self.dirty.get(&idx)
            {
                self.durable[start as usize..end as usize]
                    .copy_from_slice(&page[..(end - start) as usize]);
                changed.push(start..end);
            }
        }
        self.cut();
        changed
    }

    /// A plain cut: the view becomes the durable content again.
    pub fn cut(&mut self) {
        self.dirty.clear();
        self.size = self.durable.len() as u64;
        self.base_limit = self.size;
    }
}

#[cfg(test)]
mod tests;
