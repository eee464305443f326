//! What one identity may do: the rules matching it merged into one hash map of exact keys (and
//! one of exact device ids) with access bits, plus lists of globs, checked per request.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;

use statestore_protocol::glob::Glob;

/// What a state store request does to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAccess {
    /// GET, KEYNOTIFY, and SCAN listing the key (granted by `Read` and `ReadWrite`).
    Read,
    /// SET, DEL, VDEL (granted by `Write` and `ReadWrite`).
    Write,
}

impl KeyAccess {
    pub(crate) const fn bit(self) -> u8 {
        match self {
            KeyAccess::Read => 1,
            KeyAccess::Write => 2,
        }
    }
}

/// What a device-bound request does to a device's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceAction {
    /// SEND (`send`).
    Send,
    /// PURGE (`purge`).
    Purge,
    /// FORGET (`forget`).
    Forget,
    /// QUEUE and DEADLETTERS (`read`).
    Read,
    /// FEEDBACK COMPLETE / ABANDON (`feedback`): device-independent.
    Feedback,
}

impl DeviceAction {
    pub(crate) const fn bit(self) -> u8 {
        match self {
            DeviceAction::Send => 1,
            DeviceAction::Purge => 2,
            DeviceAction::Forget => 4,
            DeviceAction::Read => 8,
            DeviceAction::Feedback => 16,
        }
    }
}

/// A compiled glob, shared between the policy and its grants.
#[derive(Debug, Clone)]
pub(crate) enum Pattern {
    /// Only `*`s: every UTF-8 text (what the glob would answer, without collecting characters).
    AnyUtf8,
    Glob(Arc<PrefixedGlob>),
}

/// A glob and the literal text before its first `*`, `?` or `[`: a text not starting with it
/// cannot match, which is checked first (a comparison of bytes, without the glob's work).
#[derive(Debug)]
pub(crate) struct PrefixedGlob {
    prefix: Box<[u8]>,
    glob: Glob,
}

impl Pattern {
    pub(crate) fn new(text: &str, glob: Glob) -> Pattern {
        if text.chars().all(|character| character == '*') {
            return Pattern::AnyUtf8;
        }
        let literal = text.find(['*', '?', '[']).unwrap_or(text.len());
        Pattern::Glob(Arc::new(PrefixedGlob {
            prefix: text.as_bytes().get(..literal).unwrap_or_default().into(),
            glob,
        }))
    }

    /// The literal text every match starts with (empty for `*`-only patterns).
    pub(crate) fn prefix(&self) -> &[u8] {
        match self {
            Pattern::AnyUtf8 => &[],
            Pattern::Glob(glob) => &glob.prefix,
        }
    }

    /// Whether the whole of `text` matches; the caller checked that `text` is UTF-8.
    pub(crate) fn matches_utf8(&self, text: &[u8]) -> bool {
        match self {
            Pattern::AnyUtf8 => true,
            Pattern::Glob(glob) => {
                text.starts_with(&glob.prefix) && glob.glob.matches(text).matched
            }
        }
    }
}

/// Globs with their access bits, grouped by literal prefix: a text is matched only against
/// the globs whose prefix it starts with, found with one hash lookup per distinct prefix
/// length. So an identity granted 1,000 patterns `app-0001/*` ... `app-1000/*` pays for the
/// one its key can match, not a walk over all of them (the walk was 5.8 % of a busy leader's
/// CPU with 1,000 such rules, 2026-11-28).
#[derive(Debug, Default)]
pub(crate) struct PatternIndex {
    by_prefix: HashMap<Box<[u8]>, Vec<(Pattern, u8)>>,
    /// The distinct prefix lengths, ascending.
    prefix_lengths: Vec<usize>,
    patterns: usize,
}

impl PatternIndex {
    /// Indexes `patterns` (each glob once, with the bits it grants).
    pub(crate) fn new(patterns: Vec<(Pattern, u8)>) -> PatternIndex {
        let mut index = PatternIndex {
            patterns: patterns.len(),
            ..PatternIndex::default()
        };
        for (pattern, bits) in patterns {
            index
                .by_prefix
                .entry(Box::from(pattern.prefix()))
                .or_default()
                .push((pattern, bits));
        }
        index.prefix_lengths = index.by_prefix.keys().map(|prefix| prefix.len()).collect();
        index.prefix_lengths.sort_unstable();
        index.prefix_lengths.dedup();
        index.by_prefix.shrink_to_fit();
        index
    }

    /// Globs indexed.
    pub(crate) fn len(&self) -> usize {
        self.patterns
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.patterns == 0
    }

    /// Whether a glob granting `bit` matches all of `text` (UTF-8, the caller checked).
    fn grants(&self, text: &[u8], bit: u8) -> bool {
        self.prefix_lengths
            .iter()
            .take_while(|&&length| length <= text.len())
            .filter_map(|&length| self.by_prefix.get(text.get(..length)?))
            .flatten()
            .any(|(pattern, bits)| bits & bit != 0 && pattern.matches_utf8(text))
    }

    /// The heap of its table, lists and lengths (the globs are shared with the policy).
    fn approx_bytes(&self) -> usize {
        table::<Box<[u8]>, Vec<(Pattern, u8)>>(self.by_prefix.capacity())
            + self
                .by_prefix
                .keys()
                .map(|prefix| prefix.len())
                .sum::<usize>()
            + self
                .by_prefix
                .values()
                .map(|list| list.capacity() * size_of::<(Pattern, u8)>())
                .sum::<usize>()
            + self.prefix_lengths.capacity() * size_of::<usize>()
    }
}

/// A hash map's table of `capacity` slots: about 8 buckets per 7 usable slots, each with a
/// control byte.
fn table<K, V>(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    (capacity * 8 / 7 + 1) * (size_of::<(K, V)>() + 1) + 16
}

/// What one identity may do, from [`Policy::grants`](crate::Policy::grants). Holds no borrow
/// of the policy (the key bytes and globs are shared with it); cloning is cheap.
#[derive(Debug, Clone)]
pub struct Grants {
    inner: Arc<GrantsData>,
}

#[derive(Default)]
pub(crate) struct GrantsData {
    /// Everything is allowed (an open policy).
    pub(crate) open: bool,
    /// Union of the access bits of `keys` and `key_patterns`: a quick "nothing of that kind".
    pub(crate) key_bits: u8,
    pub(crate) keys: HashMap<Arc<[u8]>, u8>,
    /// Each glob once, by literal prefix.
    pub(crate) key_patterns: PatternIndex,
    /// Some rule grants `feedback` (whatever its devices).
    pub(crate) feedback: bool,
    /// Union of the action bits of `devices` and `device_patterns`.
    pub(crate) device_bits: u8,
    pub(crate) devices: HashMap<Arc<str>, u8>,
    pub(crate) device_patterns: PatternIndex,
}

impl std::fmt::Debug for GrantsData {
    /// A summary: the grants may hold a million keys.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("GrantsData")
            .field("open", &self.open)
            .field("exact_keys", &self.keys.len())
            .field("key_patterns", &self.key_patterns.len())
            .field("feedback", &self.feedback)
            .field("exact_devices", &self.devices.len())
            .field("device_patterns", &self.device_patterns.len())
            .finish()
    }
}

impl Grants {
    pub(crate) fn new(data: GrantsData) -> Grants {
        Grants {
            inner: Arc::new(data),
        }
    }

    /// Grants allowing everything (an open policy).
    pub(crate) fn open() -> Grants {
        Grants::new(GrantsData {
            open: true,
            ..GrantsData::default()
        })
    }

    #[cfg(test)]
    pub(crate) fn inner_for_tests(&self) -> &GrantsData {
        &self.inner
    }

    /// True if `access` to `key` is granted: the exact keys first (one hash lookup), then the
    /// globs granting that access until one matches (only if `key` is UTF-8).
    pub fn allows_key(&self, access: KeyAccess, key: &[u8]) -> bool {
        let data = &*self.inner;
        if data.open {
            return true;
        }
        let bit = access.bit();
        if data.key_bits & bit == 0 {
            return false;
        }
        if !data.keys.is_empty() && data.keys.get(key).is_some_and(|bits| bits & bit != 0) {
            return true;
        }
        !data.key_patterns.is_empty()
            && std::str::from_utf8(key).is_ok()
            && data.key_patterns.grants(key, bit)
    }

    /// True if `action` on device `device_id`'s queue is granted. [`DeviceAction::Feedback`]
    /// ignores `device_id`; any other action without a device id (`None`) is refused unless
    /// the policy is open (an open policy allows everything).
    pub fn allows_device(&self, action: DeviceAction, device_id: Option<&str>) -> bool {
        let data = &*self.inner;
        if data.open {
            return true;
        }
        if action == DeviceAction::Feedback {
            return data.feedback;
        }
        let bit = action.bit();
        let Some(device_id) = device_id else {
            return false;
        };
        if data.device_bits & bit == 0 {
            return false;
        }
        if !data.devices.is_empty()
            && data
                .devices
                .get(device_id)
                .is_some_and(|bits| bits & bit != 0)
        {
            return true;
        }
        data.device_patterns.grants(device_id.as_bytes(), bit)
    }

    /// The heap these grants hold of their own, plus their own size (for a cache's byte cap):
    /// the hash maps' and lists' slots, not the key bytes and globs shared with the policy.
    pub fn approx_bytes(&self) -> usize {
        let data = &*self.inner;
        size_of::<Grants>()
            + size_of::<GrantsData>()
            + 2 * size_of::<usize>() // the Arc's counts
            + table::<Arc<[u8]>, u8>(data.keys.capacity())
            + table::<Arc<str>, u8>(data.devices.capacity())
            + data.key_patterns.approx_bytes()
            + data.device_patterns.approx_bytes()
    }
}

#[cfg(test)]
mod tests;
