//! What a keyspace command produced: the reply-level [`Outcome`] and the [`KeyEvent`]s the
//! leader turns into notifications after commit.

use serde::{Deserialize, Serialize};

use statestore_vocab::hlc::Hlc;

/// Result of one entry, the same on every replica. The node maps it to the wire reply.
///
/// One flat enum for every command, as the log and the reply memory encode it (variants by
/// position, only ever appended). The keyspace builds the keyspace variants; `D`, what a
/// device-bound command did, is fixed by the machine ([`crate::machine::Outcome`]), which
/// builds [`Outcome::Device`] and [`Outcome::LimitsSet`] ([`Outcome::Nothing`] is built by
/// nobody today; it stays for the encoding).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome<D> {
    /// SET applied (`+OK`, `__ts` = new version).
    Stored {
        /// The key's new version.
        version: Hlc,
    },
    /// SET condition failed (`:-1`, `__ts` = the stored version).
    NotStored {
        /// The existing key's version.
        version: Hlc,
    },
    /// DEL/VDEL removed the key (`:1`, `__ts` = the deletion's HLC).
    Deleted {
        /// HLC of the deletion.
        version: Hlc,
    },
    /// DEL/VDEL on a missing key (`:0`).
    Missing,
    /// VDEL on a key holding another value (`:-1`).
    ValueDiffers,
    /// KEYNOTIFY registered (or already was) (`+OK`).
    Observing,
    /// KEYNOTIFY STOP removed a registration (`+OK`).
    StoppedObserving,
    /// KEYNOTIFY STOP for a key the client did not observe (`:0`).
    NotObserving,
    /// Refused by a rule decided at apply (fencing, quota).
    Rejected(Rejection),
    /// Expiry sweep result.
    Expired {
        /// Keys actually removed.
        keys: u32,
    },
    /// Registrations dropped for a departed client.
    ForgotClient {
        /// Registrations removed.
        registrations: u32,
    },
    /// New limits are in force.
    LimitsSet,
    /// What a device-bound command did.
    Device(D),
    /// Entries without application payload (blank, membership).
    Nothing,
}

/// Apply-time refusals (protocol §4, §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Rejection {
    /// The key is fenced and the request had no `__ft`.
    FencingTokenRequired,
    /// The request's `__ft` is lower than the key's token.
    FencingTokenLower,
    /// Key count, byte or registration quota exceeded.
    QuotaExceeded,
}

/// A committed change to a key that had at least one registration when it was applied
/// (protocol §7). It names no observers: the notifier reads them from the committed state, page
/// by page, and notifies those registered before the change ([`crate::keyspace::read::Observer`]),
/// so what apply hands out per change does not grow with the number of observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEvent {
    /// The key.
    pub key: Vec<u8>,
    /// New version (SET) or the deletion's HLC.
    pub version: Hlc,
    /// What happened.
    pub change: Change,
}

impl KeyEvent {
    /// Bytes the event holds: its key plus the value a SET stored.
    pub fn size_bytes(&self) -> usize {
        let value = match &self.change {
            Change::Set(value) => value.len(),
            Change::Delete => 0,
        };
        self.key.len().saturating_add(value)
    }
}

/// Kind of change in a [`KeyEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// New value.
    Set(Vec<u8>),
    /// Removed by DEL, VDEL or expiry.
    Delete,
}
