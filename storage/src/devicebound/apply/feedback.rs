//! Feedback (spec §4): the records written when a message's outcome asks for one, the
//! batches cut from them, and the batches' own queue (lock, delivery count, TTL). All of it is
//! rows of the store's ordered map (the tables are small and these commands are rare next to
//! SENDs and settlements); see the parent module's rules.

use crate::codec;
use crate::devicebound::apply::{
    BatchVisit, FEEDBACK_BATCH_RECORDS, FEEDBACK_CUT_INTERVAL_MS, Machine, add, corrupt,
    sweep_bound,
};
use crate::devicebound::command::FeedbackSettlement;
use crate::devicebound::layout::{self, DeviceTable};
use crate::devicebound::outcome::{DeviceResult, FeedbackDelivery};
use crate::devicebound::record::{
    FeedbackBatch, FeedbackRecord, FeedbackStatus, LockState, Message,
};
use crate::engine::{KvPair, Txn};
use crate::error::Result;

impl<T: Txn> Machine<'_, T> {
    /// The first `n` rows of a feedback table (oldest first).
    fn first_rows(&self, table: DeviceTable, n: usize) -> Result<Vec<KvPair>> {
        let (start, end) = table.bounds();
        self.txn.range(&start, &end).take(n).collect()
    }

    /// Writes a feedback record about `message`, dropping the oldest waiting ones over the cap.
    pub(super) fn add_feedback(
        &mut self,
        message: &Message,
        device: &[u8],
        status: FeedbackStatus,
    ) -> Result<()> {
        let cap = self.meta.settings.max_pending_feedback_records;
        self.meta_changed = true;
        if cap == 0 {
            self.count_dropped_feedback(1);
            return Ok(());
        }
        if self.meta.pending_feedback >= cap {
            let excess =
                usize::try_from(self.meta.pending_feedback - cap + 1).unwrap_or(usize::MAX);
            let oldest = self.first_rows(DeviceTable::PendingFeedback, excess)?;
            for (key, value) in &oldest {
                self.remove_pending_feedback(key, value)?;
            }
            self.count_dropped_feedback(oldest.len());
        }
        let record = FeedbackRecord {
            original_message_id: message.message_id.clone(),
            time_ms: self.time,
            status,
            device: device.to_vec(),
            generation: message.generation.clone(),
        };
        let seq = self.meta.next_feedback_seq;
        self.meta.next_feedback_seq = seq.saturating_add(1);
        self.txn
            .create(layout::pending_feedback_key(seq), codec::encode(&record));
        self.txn
            .create(layout::pending_by_device_key(device, seq), Vec::new());
        self.meta.pending_feedback = self.meta.pending_feedback.saturating_add(1);
        add(&mut self.counters.feedback_records, 1);
        Ok(())
    }

    /// Removes a waiting record (row `key` holding `value`) and its by-device entry.
    pub(super) fn remove_pending_feedback(
        &mut self,
        key: &[u8],
        value: &[u8],
    ) -> Result<FeedbackRecord> {
        let seq = layout::seq_of(key)
            .ok_or_else(|| corrupt("feedback record key", format!("{key:?}")))?;
        let record: FeedbackRecord = codec::decode("feedback record", value)?;
        self.txn.remove(key.to_vec());
        self.txn
            .remove(layout::pending_by_device_key(&record.device, seq));
        self.meta.pending_feedback = self.meta.pending_feedback.saturating_sub(1);
        self.meta_changed = true;
        Ok(record)
    }

    pub(super) fn count_dropped_feedback(&mut self, n: usize) {
        add(&mut self.counters.feedback_records_dropped, n);
        self.meta.feedback_records_dropped = self
            .meta
            .feedback_records_dropped
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        self.meta_changed = true;
    }

    // -- feedback batches --------------------------------------------------------------------

    fn batch(&self, seq: u64) -> Result<FeedbackBatch> {
        let bytes = self
            .txn
            .get_ref(&layout::batch_key(DeviceTable::FeedbackBatches, seq))?
            .ok_or_else(|| corrupt("feedback batch index", "an index entry without its batch"))?;
        codec::decode("feedback batch", &bytes)
    }

    /// Writes a batch and the index entries of its state.
    fn put_batch(&mut self, seq: u64, batch: &FeedbackBatch) {
        self.txn.put(
            layout::batch_due_key(DeviceTable::BatchExpiry, batch.expires_at_ms, seq),
            Vec::new(),
        );
        match &batch.lock {
            Some(lock) => {
                self.txn.put(
                    layout::batch_due_key(DeviceTable::BatchLockExpiry, lock.expires_at_ms, seq),
                    Vec::new(),
                );
                self.txn.put(
                    layout::batch_token_key(&lock.token),
                    seq.to_be_bytes().to_vec(),
                );
            }
            None => self.txn.put(
                layout::batch_key(DeviceTable::EnqueuedBatches, seq),
                Vec::new(),
            ),
        }
        self.txn.put(
            layout::batch_key(DeviceTable::FeedbackBatches, seq),
            codec::encode(batch),
        );
    }

    /// Removes a batch and the index entries of its state.
    fn remove_batch(&mut self, seq: u64, batch: &FeedbackBatch) {
        self.txn.remove(layout::batch_due_key(
            DeviceTable::BatchExpiry,
            batch.expires_at_ms,
            seq,
        ));
        match &batch.lock {
            Some(lock) => {
                self.txn.remove(layout::batch_due_key(
                    DeviceTable::BatchLockExpiry,
                    lock.expires_at_ms,
                    seq,
                ));
                self.txn.remove(layout::batch_token_key(&lock.token));
            }
            None => self
                .txn
                .remove(layout::batch_key(DeviceTable::EnqueuedBatches, seq)),
        }
        self.txn
            .remove(layout::batch_key(DeviceTable::FeedbackBatches, seq));
    }

    /// Removes a batch for good; `dropped` counts it as lost (TTL, delivery count, cap).
    fn discard_batch(&mut self, seq: u64, batch: &FeedbackBatch, dropped: bool) {
        self.remove_batch(seq, batch);
        self.meta.feedback_batches = self.meta.feedback_batches.saturating_sub(1);
        if dropped {
            self.meta.feedback_batches_dropped =
                self.meta.feedback_batches_dropped.saturating_add(1);
            add(&mut self.counters.feedback_batches_dropped, 1);
        }
        self.meta_changed = true;
    }

    pub(super) fn cut_feedback_batch(&mut self) -> Result<DeviceResult> {
        let pending = self.meta.pending_feedback;
        let interval_passed = self.time
            >= self
                .meta
                .last_cut_ms
                .saturating_add(FEEDBACK_CUT_INTERVAL_MS);
        if !(pending >= FEEDBACK_BATCH_RECORDS || (pending >= 1 && interval_passed)) {
            return Ok(DeviceResult::FeedbackCut { records: 0 });
        }
        let rows = self.first_rows(
            DeviceTable::PendingFeedback,
            usize::try_from(FEEDBACK_BATCH_RECORDS).unwrap_or(64),
        )?;
        let mut records = Vec::with_capacity(rows.len());
        for (key, value) in &rows {
            records.push(self.remove_pending_feedback(key, value)?);
        }
        let settings = self.meta.settings;
        if self.meta.feedback_batches >= settings.max_feedback_batches {
            let excess =
                usize::try_from(self.meta.feedback_batches - settings.max_feedback_batches + 1)
                    .unwrap_or(usize::MAX);
            let oldest = self.first_rows(DeviceTable::FeedbackBatches, excess)?;
            for (key, value) in &oldest {
                let seq = layout::seq_of(key)
                    .ok_or_else(|| corrupt("feedback batch key", format!("{key:?}")))?;
                let batch: FeedbackBatch = codec::decode("feedback batch", value)?;
                self.discard_batch(seq, &batch, true);
            }
        }
        let time = self.time;
        let count = u32::try_from(records.len()).unwrap_or(u32::MAX);
        self.meta.last_cut_ms = time;
        self.meta_changed = true;
        add(&mut self.counters.feedback_batches_cut, 1);
        if settings.max_feedback_batches == 0 {
            self.meta.feedback_batches_dropped =
                self.meta.feedback_batches_dropped.saturating_add(1);
            add(&mut self.counters.feedback_batches_dropped, 1);
            return Ok(DeviceResult::FeedbackCut { records: count });
        }
        let batch = FeedbackBatch {
            records,
            cut_ms: time,
            expires_at_ms: time.saturating_add(settings.feedback_ttl_ms),
            delivery_count: 0,
            lock: None,
        };
        let seq = self.meta.next_batch_seq;
        self.meta.next_batch_seq = seq.saturating_add(1);
        self.put_batch(seq, &batch);
        self.meta.feedback_batches = self.meta.feedback_batches.saturating_add(1);
        Ok(DeviceResult::FeedbackCut { records: count })
    }

    pub(super) fn deliver_feedback(&mut self, max: u32) -> Result<DeviceResult> {
        let budget = sweep_bound(max);
        let settings = self.meta.settings;
        let time = self.time;
        let mut visits = Vec::new();
        if budget > 0 {
            let mut locks = 0;
            let (start, end) = DeviceTable::EnqueuedBatches.bounds();
            for entry in self.txn.range(&start, &end).take(sweep_bound(u32::MAX)) {
                let (key, _) = entry?;
                let seq = layout::seq_of(&key)
                    .ok_or_else(|| corrupt("enqueued batch key", format!("{key:?}")))?;
                let batch = self.batch(seq)?;
                if batch.expires_at_ms <= time
                    || batch.delivery_count >= settings.feedback_max_delivery_count
                {
                    visits.push(BatchVisit::Drop(seq, batch));
                } else {
                    visits.push(BatchVisit::Lock(seq, batch));
                    locks += 1;
                    if locks == budget {
                        break;
                    }
                }
            }
        }
        let mut batches = Vec::new();
        for visit in visits {
            match visit {
                BatchVisit::Drop(seq, batch) => self.discard_batch(seq, &batch, true),
                BatchVisit::Lock(seq, old) => {
                    let lock = LockState {
                        token: self.batch_token(),
                        expires_at_ms: time.saturating_add(settings.feedback_lock_duration_ms),
                    };
                    let locked = FeedbackBatch {
                        delivery_count: old.delivery_count.saturating_add(1),
                        lock: Some(lock.clone()),
                        ..old.clone()
                    };
                    self.remove_batch(seq, &old);
                    self.put_batch(seq, &locked);
                    batches.push(FeedbackDelivery {
                        token: lock.token,
                        cut_ms: locked.cut_ms,
                        lock_expires_at_ms: lock.expires_at_ms,
                        expires_at_ms: locked.expires_at_ms,
                        delivery_count: locked.delivery_count,
                        records: locked.records,
                    });
                }
            }
        }
        add(&mut self.counters.feedback_batches_delivered, batches.len());
        Ok(DeviceResult::FeedbackDelivered { batches })
    }

    /// The batch `token` locks now.
    fn locked_batch(&self, token: &str) -> Result<Option<(u64, FeedbackBatch)>> {
        let Some(bytes) = self.txn.get_ref(&layout::batch_token_key(token))? else {
            return Ok(None);
        };
        let seq = <[u8; 8]>::try_from(bytes.as_ref())
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt("batch token", format!("{} bytes", bytes.len())))?;
        let batch = self.batch(seq)?;
        if batch
            .lock
            .as_ref()
            .is_none_or(|lock| !crate::devicebound::token::tokens_match(&lock.token, token))
        {
            return Ok(None);
        }
        Ok(Some((seq, batch)))
    }

    pub(super) fn undeliver_feedback(&mut self, token: &str) -> Result<bool> {
        let Some((seq, old)) = self.locked_batch(token)? else {
            return Ok(false);
        };
        let given_back = FeedbackBatch {
            delivery_count: old.delivery_count.saturating_sub(1),
            lock: None,
            ..old.clone()
        };
        self.remove_batch(seq, &old);
        self.put_batch(seq, &given_back);
        add(&mut self.counters.feedback_batches_undelivered, 1);
        self.meta_changed = true;
        Ok(true)
    }

    pub(super) fn settle_feedback(
        &mut self,
        token: &str,
        settlement: FeedbackSettlement,
    ) -> Result<bool> {
        let Some((seq, old)) = self.locked_batch(token)? else {
            return Ok(false);
        };
        let time = self.time;
        let lock_holds = old
            .lock
            .as_ref()
            .is_some_and(|lock| time < lock.expires_at_ms);
        if !lock_holds || old.expires_at_ms <= time {
            return Ok(false);
        }
        match settlement {
            FeedbackSettlement::Complete => self.discard_batch(seq, &old, false),
            FeedbackSettlement::Abandon => {
                let released = FeedbackBatch {
                    lock: None,
                    ..old.clone()
                };
                self.remove_batch(seq, &old);
                self.put_batch(seq, &released);
            }
        }
        add(&mut self.counters.feedback_batches_settled, 1);
        Ok(true)
    }

    /// Up to `max` batch seqs of a batch due-time table due now.
    fn due_batches(&self, table: DeviceTable, max: u32) -> Result<Vec<u64>> {
        let (start, _) = table.bounds();
        let end = layout::due_bound(table.prefix(), self.time);
        let mut due = Vec::new();
        for entry in self.txn.range(&start, &end).take(sweep_bound(max)) {
            let (key, _) = entry?;
            let (_, seq) = layout::split_batch_due_key(&key)
                .ok_or_else(|| corrupt("batch due index key", format!("{key:?}")))?;
            due.push(seq);
        }
        Ok(due)
    }

    pub(super) fn expire_feedback_locks(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_batches(DeviceTable::BatchLockExpiry, max)?;
        for seq in &due {
            let old = self.batch(*seq)?;
            let released = FeedbackBatch {
                lock: None,
                ..old.clone()
            };
            self.remove_batch(*seq, &old);
            self.put_batch(*seq, &released);
        }
        add(&mut self.counters.feedback_batches_redelivered, due.len());
        Ok(DeviceResult::LocksExpired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }

    pub(super) fn expire_feedback_batches(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_batches(DeviceTable::BatchExpiry, max)?;
        for seq in &due {
            let batch = self.batch(*seq)?;
            self.discard_batch(*seq, &batch, true);
        }
        Ok(DeviceResult::Expired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }
}
