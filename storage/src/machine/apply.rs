//! [`Machine`]: the deterministic state machine of one transaction. Applies each [`Proposal`]
//! in log order: settles what is common to every entry (the store time, the reply memory of
//! §6, new limits), then hands the mutation to the keyspace or to the device-bound queues, and
//! at the end writes back the store-wide records both keep in memory meanwhile.
//!
//! No clock, no I/O beyond the transaction, no panics on stored data (corruption surfaces as an
//! error): every replica reaches the same state and the same [`Outcome`].
//!
//! The consensus layer applies many proposals (a log entry holds up to 1,024, and one apply
//! call may cover several entries) in one [`Machine`] over one overlay transaction. Work per
//! proposal must not grow with the number of proposals already applied in that transaction,
//! nor with the size of the store: the store-wide records (the [`KeyspaceMeta`] with its
//! counters, the time floor and the limits; the device-bound meta record) are read once per
//! transaction (the device-bound one at its first device-bound command) and written once at
//! [`Machine::finish`]; the reply memory's cost rules are in [`crate::machine::replies`], the
//! keyspace's in [`crate::keyspace`].

use crate::codec;
use crate::devicebound::{self, DeviceIndex, DeviceboundMeta, TokenSeed};
use crate::engine::{OrderedRead, Txn};
use crate::error::Result;
use crate::keyspace::{self, Keyspace, KeyspaceMeta, SetWrite};
use crate::layout::{self, Table};
use crate::machine::outcome::{Applied, Outcome};
use crate::machine::proposal::{Mutation, Proposal};
use crate::machine::read;
use crate::machine::replies::Replies;

/// The state machine inside one transaction. Open it, apply proposals in log order, then
/// [`Machine::finish`] to write back the store-wide records.
///
/// Everything in the state's tables must be written through it while it is open (the
/// consensus layer adds its own [`Table::ConsensusState`] records through
/// [`Machine::put_consensus_record`]): it caches facts about the transaction's contents.
pub struct Machine<'t, T: Txn> {
    txn: &'t mut T,
    /// The keyspace meta record: the keyspace's counters, and the time floor, reply-memory
    /// counters and limits the machine keeps.
    meta: KeyspaceMeta,
    meta_changed: bool,
    /// No live [`Table::ReplyExpiry`] entry of the transaction sorts below this key.
    reply_cursor: Vec<u8>,
    /// The device-bound meta record, read at the transaction's first device-bound command and
    /// written back by [`Machine::finish`] (`None`: no such command yet).
    device_meta: Option<DeviceboundMeta>,
    device_meta_changed: bool,
    /// The device queues' index of the store as this transaction changes it.
    devices: Devices<'t>,
}

/// Where a [`Machine`] finds the device queues' index.
enum Devices<'t> {
    /// Built from the transaction's rows at its first device-bound command (`None`: not yet):
    /// for callers without a long-lived index (tests, tools).
    Loaded(Option<DeviceIndex>),
    /// The caller's index, kept from one transaction to the next (the consensus layer's).
    Kept(&'t mut DeviceIndex),
}

impl Devices<'_> {
    fn get(&mut self, view: &(impl OrderedRead + ?Sized)) -> Result<&mut DeviceIndex> {
        match self {
            Devices::Kept(index) => Ok(index),
            Devices::Loaded(Some(index)) => Ok(index),
            Devices::Loaded(loaded) => Ok(loaded.insert(DeviceIndex::load(view)?)),
        }
    }
}

/// What one transaction learnt about the store that stays true for the next one, provided
/// every write to the state's tables goes through a [`Machine`]: the consensus layer carries
/// it from one apply call to the next and drops it when a snapshot replaces the state. With a
/// write-back layer in front of the store, removed reply-index entries linger as tombstones
/// until they are written out; starting the reply scan at the carried cursor skips them.
#[derive(Debug, Clone, Default)]
pub struct Carry {
    reply_cursor: Option<Vec<u8>>,
}

impl<'t, T: Txn> Machine<'t, T> {
    /// Loads the store-wide state from `txn`; the device queues' index is built from its rows
    /// when a device-bound command first needs it.
    pub fn open(txn: &'t mut T) -> Result<Self> {
        Self::open_carrying(txn, &Carry::default())
    }

    /// [`Machine::open`], starting from what the previous transaction learnt.
    pub fn open_carrying(txn: &'t mut T, carry: &Carry) -> Result<Self> {
        Self::open_with(txn, carry, Devices::Loaded(None))
    }

    /// [`Machine::open_carrying`] with the caller's device queues' index, which must be the
    /// index of `txn`'s rows ([`DeviceIndex::load`]) and is changed as device-bound commands
    /// apply. If applying fails, the caller abandons the transaction and must rebuild the index
    /// from the committed rows.
    pub fn open_with_index(
        txn: &'t mut T,
        carry: &Carry,
        index: &'t mut DeviceIndex,
    ) -> Result<Self> {
        Self::open_with(txn, carry, Devices::Kept(index))
    }

    fn open_with(txn: &'t mut T, carry: &Carry, devices: Devices<'t>) -> Result<Self> {
        let meta = keyspace::read::meta(&*txn)?;
        Ok(Machine {
            txn,
            meta,
            meta_changed: false,
            reply_cursor: carry
                .reply_cursor
                .clone()
                .unwrap_or_else(|| Table::ReplyExpiry.bounds().0),
            device_meta: None,
            device_meta_changed: false,
            devices,
        })
    }

    /// What the next transaction may start from (see [`Carry`]).
    pub fn carry(&self) -> Carry {
        Carry {
            reply_cursor: Some(self.reply_cursor.clone()),
        }
    }

    /// Writes the consensus layer's record `name` (opaque bytes: its last applied log id, its
    /// membership) in the same atomic batch; it is part of neither digests nor snapshots. Read
    /// it back with [`crate::machine::read::consensus_record`].
    pub fn put_consensus_record(&mut self, name: &[u8], value: Vec<u8>) {
        self.txn.put(layout::consensus_key(name), value);
    }

    /// Store-wide state as of the entries applied so far.
    pub fn meta(&self) -> &KeyspaceMeta {
        &self.meta
    }

    /// Writes the store-wide state back (the keyspace's and the device-bound meta records);
    /// returns the keyspace's. Every transaction that applied proposals must end with it, or
    /// their counters are lost.
    pub fn finish(self) -> KeyspaceMeta {
        if self.device_meta_changed
            && let Some(device_meta) = &self.device_meta
        {
            devicebound::write_meta(&mut *self.txn, device_meta);
        }
        if self.meta_changed {
            self.txn
                .put(keyspace::layout::meta_key(), codec::encode(&self.meta));
        }
        self.meta
    }

    /// Applies one proposal: the store time, the reply memory (a retry of a remembered request
    /// gets its reply and changes nothing), the mutation, then the new reply remembered.
    pub fn apply(&mut self, proposal: &Proposal) -> Result<Applied> {
        let time = read::store_time(self.meta.time_floor_ms, proposal.wall_ms);
        if time != self.meta.time_floor_ms {
            self.meta.time_floor_ms = time;
            self.meta_changed = true;
        }
        self.replies().prune_replies(time)?;

        let slot = match &proposal.request {
            Some(request) => match self.replies().reply_slot(request, time)? {
                Ok(slot) => Some(slot),
                Err(outcome) => {
                    return Ok(Applied {
                        outcome,
                        events: Vec::new(),
                    });
                }
            },
            None => None,
        };

        let mut events = Vec::new();
        let outcome = self.dispatch(proposal, time, &mut events)?;

        if let Some(slot) = slot {
            self.replies().remember(slot, &outcome, time)?;
        }
        Ok(Applied { outcome, events })
    }

    /// Hands the mutation to the part of the state it concerns, at store time `time`.
    fn dispatch(
        &mut self,
        proposal: &Proposal,
        time: u64,
        events: &mut Vec<keyspace::KeyEvent>,
    ) -> Result<Outcome> {
        let stamp = &proposal.stamp;
        Ok(match &proposal.mutation {
            Mutation::Set {
                key,
                value,
                condition,
                expire_after_ms,
                fencing_token,
            } => {
                let write = SetWrite {
                    key,
                    value,
                    condition: *condition,
                    expire_after_ms: *expire_after_ms,
                    fencing_token: fencing_token.as_ref(),
                };
                self.keyspace().set(stamp, time, write, events)?
            }
            Mutation::Del { key, fencing_token } => {
                self.keyspace()
                    .delete(stamp, time, key, None, fencing_token.as_ref(), events)?
            }
            Mutation::VDel {
                key,
                value,
                fencing_token,
            } => self.keyspace().delete(
                stamp,
                time,
                key,
                Some(value.as_slice()),
                fencing_token.as_ref(),
                events,
            )?,
            Mutation::Observe { client, key } => self.keyspace().observe(client, key)?,
            Mutation::Unobserve { client, key } => self.keyspace().unobserve(client, key)?,
            Mutation::Expire { keys } => self.keyspace().expire(stamp, time, keys, events)?,
            Mutation::ForgetClient { client } => self.keyspace().forget_client(client)?,
            Mutation::SetLimits(limits) => {
                self.meta.limits = *limits;
                self.meta_changed = true;
                Outcome::LimitsSet
            }
            Mutation::Device(command) => {
                self.device(time, proposal.token_seed.as_ref(), command)?
            }
        })
    }

    /// Applies a device-bound command at store time `time` with the entry's token seed.
    fn device(
        &mut self,
        time: u64,
        seed: Option<&TokenSeed>,
        command: &devicebound::DeviceCommand,
    ) -> Result<Outcome> {
        let device_meta = match &mut self.device_meta {
            Some(device_meta) => device_meta,
            None => self
                .device_meta
                .insert(devicebound::read::meta(&*self.txn)?),
        };
        let index = self.devices.get(&*self.txn)?;
        let (outcome, changed) =
            devicebound::apply_to(&mut *self.txn, index, device_meta, (time, seed), command)?;
        self.device_meta_changed |= changed;
        Ok(Outcome::Device(Box::new(outcome)))
    }

    /// The keyspace over this transaction, for one command.
    fn keyspace(&mut self) -> Keyspace<'_, T> {
        Keyspace::new(&mut *self.txn, &mut self.meta, &mut self.meta_changed)
    }

    /// The reply memory of this transaction.
    fn replies(&mut self) -> Replies<'_, T> {
        Replies {
            txn: &mut *self.txn,
            meta: &mut self.meta,
            meta_changed: &mut self.meta_changed,
            cursor: &mut self.reply_cursor,
        }
    }
}
