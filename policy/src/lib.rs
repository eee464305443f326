//! statestore-policy: who may do what to which state store keys and device-bound queues
//! (issue 29, item 3), read from a TOML policy file and compiled for fast checks.
//!
//! The state store rules follow Azure IoT Operations' `stateStoreResources`: a rule names
//! principals (the identities the broker vouches for), keys (glob patterns, exact strings or
//! binary keys) and a method (`Read`, `Write`, `ReadWrite`). Device-bound rules name
//! principals, device ids and actions on those devices' queues.
//!
//! # The policy file
//!
//! ```toml
//! # Named groups of principals (each member: an exact identity or a SCAN glob over it).
//! [groups]
//! operators = ["alice", "ops-*"]
//!
//! # State store rules (AIO stateStoreResources): who may do what on which keys.
//! [[state_store]]
//! principals = ["bob", "sensor-*"]   # exact identities or globs; optional if `groups` given
//! groups = ["operators"]             # names from [groups]; optional
//! key_type = "pattern"               # "pattern" (default) | "string" | "binary"
//! encoding = "base64"                # key_type = "binary" only: "base64" (default) | "hex"
//! keys = ["config/*", "shared/?"]
//! method = "ReadWrite"               # "Read" | "Write" | "ReadWrite"
//!
//! # Device-bound rules: who may do what to which devices' queues.
//! [[devicebound]]
//! principals = ["backend"]
//! groups = []
//! devices = ["*"]                    # exact device ids or globs
//! actions = ["send", "purge", "forget", "read", "feedback"]
//! ```
//!
//! - **Principals** (in `principals` and group members) and **devices** are exact identities
//!   or device ids, or SCAN globs ([`statestore_protocol::glob`]: `*`, `?`, `[...]`, no
//!   escapes, `[*]` is a literal star). An entry containing none of `*`, `?`, `[` is exact.
//!   A rule needs `principals` or `groups` (or both, at least one of them non-empty); `groups`
//!   names tables of `[groups]` (an unknown name is an error). A group may be empty.
//! - **Keys**: `key_type = "pattern"` (the default): each key is a SCAN glob over the key, so
//!   it only matches UTF-8 keys (a non-UTF-8 key matches no pattern, not even `*`); an entry
//!   without `*`, `?`, `[` matches exactly itself. `"string"`: each key is exactly that UTF-8
//!   text, `*` included (`a*` matches only the key `a*`). `"binary"`: each key is the bytes
//!   its text decodes to, with `encoding = "base64"` (the default: standard alphabet, padding
//!   optional) or `"hex"` (either case). `encoding` is an error with any other key type.
//! - **Methods**: `Read` grants [`KeyAccess::Read`] (GET, KEYNOTIFY, and SCAN listing the
//!   key), `Write` grants [`KeyAccess::Write`] (SET, DEL, VDEL), `ReadWrite` both.
//! - **Actions**: `send`, `purge`, `forget`, `read` (QUEUE and DEADLETTERS) and `feedback`
//!   (FEEDBACK COMPLETE/ABANDON). `feedback` is device-independent: a rule granting it grants
//!   it whatever its `devices` say (they must still be present and non-empty).
//! - `keys`, `method`, `devices` and `actions` are required; `keys`, `devices` and `actions`
//!   must not be empty, nor may any principal, group member, key or device be the empty
//!   string. Unknown fields are errors everywhere.
//!
//! # Evaluation
//!
//! A policy with no rules (an empty file, or only `[groups]`) is **open**: everything is
//! allowed ([`Policy::is_open`]; the node warns). Once there is any rule the default is
//! **deny**: a request is allowed iff some rule grants it (a rule matching the identity, whose
//! method or actions include the access and whose keys or devices match). An unknown
//! requester (`None` identity) matches no principal, not even `*`.
//!
//! # Errors
//!
//! [`PolicyError`] names where the problem is: rules are counted from 0 in file order
//! (`state_store[3]`, the fourth `[[state_store]]`) with the line of their header, then the
//! field and entry (`state_store[3].keys[1] (line 12): invalid base64 "ab$c": ...`). Values in
//! messages are cut to 100 characters.
//!
//! # Limits
//!
//! The text is at most [`MAX_POLICY_BYTES`]; at most [`MAX_RULES`] rules (`state_store` and
//! `devicebound` together), [`MAX_GROUPS`] groups, [`MAX_ENTRIES`] members per group and
//! principals, groups, keys, devices or actions per rule; a key (after decoding), principal,
//! group name or device id is at most [`MAX_ITEM_BYTES`]. A glob also obeys the SCAN glob's
//! caps (`MAX_PATTERN_ELEMENTS` and others).
//!
//! # Cost
//!
//! [`Policy::parse`] indexes exact principals in a hash map and keeps glob principals in a
//! list, each pointing at its rules and groups. [`Policy::grants`] collects one identity's
//! rules and merges them into a [`Grants`]: exact keys (and device ids) in one hash map of
//! access bits, globs in a list. [`Grants::allows_key`] is one hash lookup, then the globs
//! granting that access in order. Grants share the key bytes with the policy (`Arc`), so they
//! are cheap to build and to cache per identity ([`Grants::approx_bytes`]).
//!
//! Pure: no I/O, no clock, no global state; nothing panics on any input.

mod document;
mod error;
mod grants;
mod policy;

pub use error::PolicyError;
pub use grants::{DeviceAction, Grants, KeyAccess};
pub use policy::Policy;

/// Largest policy text accepted, in bytes (4 MiB).
pub const MAX_POLICY_BYTES: usize = 4 * 1024 * 1024;

/// Most rules (`state_store` and `devicebound` together).
pub const MAX_RULES: usize = 100_000;

/// Most groups in `[groups]`.
pub const MAX_GROUPS: usize = 10_000;

/// Most entries in one list: members of a group; principals, groups, keys, devices or actions
/// of a rule.
pub const MAX_ENTRIES: usize = 10_000;

/// Longest principal, group name, key (decoded, for binary keys) or device id, in bytes.
pub const MAX_ITEM_BYTES: usize = 65_535;
