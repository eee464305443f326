//! Lock tokens: unguessable, yet the same on every replica.
//!
//! A token is its delivery's place and 128 secret bits, in lower-case hex: a message token is
//! `m`, its message's place in its device's queue (16 digits) and the secret (32 digits); a
//! feedback batch token is `f`, the store-wide count of tokens issued (16 digits) and the
//! secret. 49 ASCII bytes, inside the spec's 64 and safe in a topic level and a property bag.
//! The place lets a settlement find its message with one look at its own device's queue; the
//! secret is what makes it the holder's: a settlement must present all of it, compared in
//! constant time ([`tokens_match`]).
//!
//! Apply never reads a clock or a random source, so the secrets come from the entry: the
//! leader draws a [`TokenSeed`] (32 bytes from the operating system's CSPRNG) for every
//! device-bound proposal, and apply expands it with ChaCha12 ([`TokenSecrets`]), a named,
//! value-stable generator (`rand_chacha`'s streams are fixed by the algorithm, unlike `StdRng`,
//! which may change between versions and would make replicas of two builds diverge; a test
//! pins the output). The stream is the count of tokens issued before the entry, so even two
//! entries with the same seed never share a secret. Whoever reads the Raft log or a snapshot
//! learns the tokens; both already hold the queues' content, and only the voters have them.

use rand_chacha::ChaCha12Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// Bytes of secret in every lock token (128 bits).
pub const SECRET_BYTES: usize = 16;

/// Length of every token this build issues.
pub const TOKEN_BYTES: usize = 1 + 16 + 2 * SECRET_BYTES;
const _: () = assert!(TOKEN_BYTES <= 64, "spec: a lock token is at most 64 bytes");

/// The randomness a device-bound proposal carries for the lock tokens its apply issues.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct TokenSeed(pub [u8; 32]);

impl std::fmt::Debug for TokenSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never in a log line: it would give away the tokens of its entry.
        f.write_str("TokenSeed(..)")
    }
}

/// The secrets of one entry's tokens, drawn in apply order from the entry's seed.
pub(crate) struct TokenSecrets {
    seed: TokenSeed,
    /// Made at the first token of the entry (most entries issue none).
    stream: Option<ChaCha12Rng>,
}

impl TokenSecrets {
    /// The secrets of an entry carrying `seed` (`None` only from a proposal built without one,
    /// which the node never does: the all-zero seed then still gives every token of the store
    /// a different secret, through the stream, but a predictable one).
    pub(crate) fn new(seed: Option<&TokenSeed>) -> Self {
        TokenSecrets {
            seed: seed.copied().unwrap_or_default(),
            stream: None,
        }
    }

    /// The next secret; `issued` is the store's count of tokens issued before this entry's
    /// first one (it picks the stream, read only at the first call).
    pub(crate) fn next(&mut self, issued: u64) -> [u8; SECRET_BYTES] {
        let seed = self.seed.0;
        let stream = self.stream.get_or_insert_with(|| {
            let mut rng = ChaCha12Rng::from_seed(seed);
            rng.set_stream(issued);
            rng
        });
        let mut secret = [0; SECRET_BYTES];
        stream.fill_bytes(&mut secret);
        secret
    }
}

/// The lock token of a message delivery at `seq` of its device's queue.
pub fn message_token(seq: u64, secret: &[u8; SECRET_BYTES]) -> String {
    token('m', seq, secret)
}

/// The lock token of a feedback batch delivery, the `issued`-th token of the store (its batch
/// is found through [`crate::devicebound::layout::DeviceTable::BatchTokens`]).
pub fn batch_token(issued: u64, secret: &[u8; SECRET_BYTES]) -> String {
    token('f', issued, secret)
}

fn token(kind: char, place: u64, secret: &[u8; SECRET_BYTES]) -> String {
    let mut token = String::with_capacity(TOKEN_BYTES);
    token.push(kind);
    push_hex(&mut token, &place.to_be_bytes());
    push_hex(&mut token, secret);
    token
}

/// Appends `bytes` as lower-case hex (what `{:02x}` writes per byte, without the formatting
/// machinery: a token is made per delivery).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// The queue place a [`message_token`] names (`None`: not shaped like a message token).
pub fn message_token_seq(token: &str) -> Option<u64> {
    let digits = token.strip_prefix('m')?;
    if digits.len() != TOKEN_BYTES - 1 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits.get(..16)?, 16).ok()
}

/// Whether the token a settlement presents is the lock's, in time independent of where they
/// differ (lengths are not secret: every token has the same).
pub fn tokens_match(lock: &str, presented: &str) -> bool {
    bool::from(lock.as_bytes().ct_eq(presented.as_bytes()))
}

#[cfg(test)]
mod tests;
