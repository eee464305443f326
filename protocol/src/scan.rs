//! One page of `SCAN pattern [token]` (spec §2, issue 12) as a pure function over the keys in
//! ascending order, and its continuation token.
//!
//! The token is opaque to clients: a format byte, then the last key this page examined. The
//! next page starts strictly after that key, so a scan (one page after another, a failed page
//! retried with the same token) returns every key that existed for the scan's whole duration
//! exactly once, in key order; keys written or deleted meanwhile may or may not appear.
//!
//! Every page is bounded: at most [`PageLimits::max_keys`] keys and about
//! [`PageLimits::max_reply_bytes`] of them, at most [`PageLimits::max_examined`] stored keys
//! looked at, and at most [`PageLimits::max_comparisons`] pattern comparisons (one key may
//! overrun it by its own cost, which [`super::glob`] bounds), and it ends when the caller's
//! `should_stop` says so ([`page_until`]: the service stops a page at
//! [`PageLimits::max_duration`]; this module reads no clock). A page that stops early carries a
//! token, even when it holds no key, and every page examines at least one key: a scan always
//! progresses.

use super::ProtocolError;
use super::glob::Glob;
use super::resp3::encode_bulk;

/// First byte of every token this version issues.
const TOKEN_FORMAT: u8 = 1;

/// What one page may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Keys returned.
    pub max_keys: usize,
    /// Bytes of the returned keys (a single key is returned whatever its size).
    pub max_reply_bytes: usize,
    /// Stored keys looked at, matching or not, expired or not.
    pub max_examined: usize,
    /// Bytes of the stored records (key and value) looked at.
    pub max_examined_bytes: usize,
    /// Pattern comparisons.
    pub max_comparisons: u64,
    /// Time one page may take (enforced by the caller through [`page_until`]'s `should_stop`,
    /// which is asked before each key after the first).
    pub max_duration: std::time::Duration,
}

impl Default for PageLimits {
    fn default() -> Self {
        PageLimits {
            max_keys: 1000,
            max_reply_bytes: 256 * 1024,
            max_examined: 10_000,
            max_examined_bytes: 16 << 20,
            max_comparisons: 8_000_000,
            max_duration: std::time::Duration::from_millis(50),
        }
    }
}

/// A stored key as the scan sees it, in ascending key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// The key.
    pub key: Vec<u8>,
    /// False when it has expired (it is skipped, but counts as examined).
    pub live: bool,
    /// Bytes read to look at it (its stored record).
    pub stored_bytes: usize,
}

/// One page: the matching keys and, unless the scan is complete, where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Matching live keys, ascending.
    pub keys: Vec<Vec<u8>>,
    /// The token of the next page; `None` on the last page.
    pub next_token: Option<Vec<u8>>,
}

impl Page {
    /// The reply payload: `*1\r\n*<k>\r\n<keys>` on the last page,
    /// `*2\r\n*<k>\r\n<keys>$<t>\r\n<token>\r\n` otherwise.
    pub fn encode(&self) -> Vec<u8> {
        let key_bytes: usize = self.keys.iter().map(|key| key.len() + 16).sum();
        let token_bytes = self.next_token.as_ref().map_or(0, |t| t.len() + 16);
        let mut out = Vec::with_capacity(16 + key_bytes + token_bytes);
        let elements = if self.next_token.is_some() { 2 } else { 1 };
        out.extend_from_slice(format!("*{elements}\r\n*{}\r\n", self.keys.len()).as_bytes());
        for key in &self.keys {
            encode_bulk(&mut out, key);
        }
        if let Some(token) = &self.next_token {
            encode_bulk(&mut out, token);
        }
        out
    }
}

/// The key a token says to start after: `None` for no token (the first page).
pub fn resume_after(token: Option<&[u8]>) -> Result<Option<&[u8]>, ProtocolError> {
    match token {
        None => Ok(None),
        Some([TOKEN_FORMAT, key @ ..]) if !key.is_empty() => Ok(Some(key)),
        Some(_) => Err(ProtocolError::Syntax),
    }
}

fn token_after(key: &[u8]) -> Vec<u8> {
    let mut token = Vec::with_capacity(1 + key.len());
    token.push(TOKEN_FORMAT);
    token.extend_from_slice(key);
    token
}

/// Why a page ended: the scan was complete, or which limit cut it (a closed set: the label
/// values of `statestore_scan_pages_total{end}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageEnd {
    /// No key is left after this page.
    Complete,
    /// [`PageLimits::max_keys`].
    Keys,
    /// [`PageLimits::max_reply_bytes`].
    ReplyBytes,
    /// [`PageLimits::max_examined`].
    Examined,
    /// [`PageLimits::max_examined_bytes`].
    ExaminedBytes,
    /// [`PageLimits::max_comparisons`].
    Comparisons,
    /// The caller's `should_stop` ([`PageLimits::max_duration`]).
    Deadline,
}

impl PageEnd {
    /// Every value, in label order.
    pub const ALL: [PageEnd; 7] = [
        PageEnd::Complete,
        PageEnd::Keys,
        PageEnd::ReplyBytes,
        PageEnd::Examined,
        PageEnd::ExaminedBytes,
        PageEnd::Comparisons,
        PageEnd::Deadline,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            PageEnd::Complete => "complete",
            PageEnd::Keys => "keys",
            PageEnd::ReplyBytes => "reply_bytes",
            PageEnd::Examined => "examined",
            PageEnd::ExaminedBytes => "examined_bytes",
            PageEnd::Comparisons => "comparisons",
            PageEnd::Deadline => "deadline",
        }
    }
}

/// Builds one page from `stored`: the keys after the token's key, ascending. Errors of the
/// source end the page with that error. [`page_until`] that never stops early on its own.
pub fn page<E>(
    pattern: &Glob,
    stored: impl IntoIterator<Item = Result<StoredKey, E>>,
    limits: &PageLimits,
) -> Result<Page, E> {
    page_until(pattern, stored, limits, || false).map(|(page, _)| page)
}

/// [`page`], also ending (with a token) as soon as `should_stop` returns true; it is asked
/// before each key but the first, after the other limits, so a page always examines at least
/// one key. Returns the page and why it ended.
pub fn page_until<E>(
    pattern: &Glob,
    stored: impl IntoIterator<Item = Result<StoredKey, E>>,
    limits: &PageLimits,
    mut should_stop: impl FnMut() -> bool,
) -> Result<(Page, PageEnd), E> {
    let mut keys = Vec::new();
    let mut reply_bytes = 0usize;
    let mut comparisons = 0u64;
    let mut examined_bytes = 0usize;
    let mut last_examined: Option<Vec<u8>> = None;
    for (examined, entry) in stored.into_iter().enumerate() {
        // Never before the first key: a page always makes progress.
        let cut = if examined == 0 {
            None
        } else if keys.len() >= limits.max_keys {
            Some(PageEnd::Keys)
        } else if reply_bytes >= limits.max_reply_bytes {
            Some(PageEnd::ReplyBytes)
        } else if examined >= limits.max_examined {
            Some(PageEnd::Examined)
        } else if examined_bytes >= limits.max_examined_bytes {
            Some(PageEnd::ExaminedBytes)
        } else if comparisons >= limits.max_comparisons {
            Some(PageEnd::Comparisons)
        } else if should_stop() {
            Some(PageEnd::Deadline)
        } else {
            None
        };
        if let Some(end) = cut {
            let next_token = last_examined.as_deref().map(token_after);
            return Ok((Page { keys, next_token }, end));
        }
        let StoredKey {
            key,
            live,
            stored_bytes,
        } = entry?;
        examined_bytes = examined_bytes.saturating_add(stored_bytes);
        if live {
            let result = pattern.matches(&key);
            comparisons = comparisons.saturating_add(result.comparisons);
            if result.matched {
                if !keys.is_empty() && reply_bytes + key.len() > limits.max_reply_bytes {
                    // It does not fit: the next page starts with it.
                    let next_token = last_examined.as_deref().map(token_after);
                    return Ok((Page { keys, next_token }, PageEnd::ReplyBytes));
                }
                reply_bytes += key.len();
                keys.push(key.clone());
            }
        }
        last_examined = Some(key);
    }
    let page = Page {
        keys,
        next_token: None,
    };
    Ok((page, PageEnd::Complete))
}

#[cfg(test)]
mod tests;
