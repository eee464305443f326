//! The tests run on a current-thread runtime: the batching task only runs while the test
//! awaits, so proposals submitted with no await in between are all queued when it next
//! looks, and form one batch if a slot is free.

use std::time::Duration;

use statestore_storage::machine::Mutation;
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;
use tokio::time::timeout;

use super::*;

/// How long a test waits for an event before failing (instead of hanging).
const PATIENCE: Duration = Duration::from_secs(10);

/// A waiter's receiver, as [`Batcher::submit`] returns it.
type Answer = oneshot::Receiver<Result<Outcome>>;

/// A batch the fake writer received, and the handle that applies it.
struct Written {
    /// The batch's proposals, in batch order.
    proposals: Vec<Proposal>,
    /// Completes the batch's second phase.
    applied: oneshot::Sender<Result<Vec<Outcome>>>,
}

impl Written {
    /// The keys of the batch's proposals, in batch order.
    fn keys(&self) -> Vec<String> {
        self.proposals.iter().map(key_of).collect()
    }

    /// Applies the batch with `result`.
    fn complete(self, result: Result<Vec<Outcome>>) {
        if self.applied.send(result).is_err() {
            panic!("the batcher stopped waiting for its batch");
        }
    }
}

/// A writer that accepts every batch at once and reports it to the test, which applies it.
#[derive(Clone)]
struct FakeWriter {
    /// Where written batches go: never more than the batcher keeps in flight, each at most
    /// `MAX_BATCH_BYTES`.
    written: mpsc::Sender<Written>,
    /// What each leadership confirmation answers, in order (sent by the test; none left:
    /// another node leads).
    confirmations: Arc<tokio::sync::Mutex<mpsc::Receiver<Result<()>>>>,
}

impl LogWriter for FakeWriter {
    async fn write(
        &self,
        batch: Batch,
    ) -> Result<impl Future<Output = Result<Vec<Outcome>>> + Send + 'static> {
        let (applied, outcome) = oneshot::channel();
        self.written
            .send(Written {
                proposals: batch.proposals().to_vec(),
                applied,
            })
            .await
            .map_err(|_| Error::Stopped(StopCause::WriteAbandoned))?;
        Ok(async move {
            outcome
                .await
                .unwrap_or_else(|_| Err(Error::Stopped(StopCause::WriteDropped)))
        })
    }

    async fn confirm_leadership(&self) -> Result<()> {
        self.confirmations
            .lock()
            .await
            .recv()
            .await
            .unwrap_or(Err(Error::NotLeader { leader: None }))
    }
}

/// A batcher over a fake writer, and the batches it writes.
fn start(queue_capacity: usize) -> (Batcher, mpsc::Receiver<Written>) {
    let (batcher, writes, _confirm) = start_confirming(queue_capacity);
    (batcher, writes)
}

/// [`start`], and the sender of the fake writer's leadership confirmations.
fn start_confirming(
    queue_capacity: usize,
) -> (Batcher, mpsc::Receiver<Written>, mpsc::Sender<Result<()>>) {
    let (written, writes) = mpsc::channel(MAX_BATCHES_IN_FLIGHT);
    // Each test confirms at most a few times; a bounded queue is enough.
    let (confirm, confirmations) = mpsc::channel(4);
    let writer = FakeWriter {
        written,
        confirmations: Arc::new(tokio::sync::Mutex::new(confirmations)),
    };
    let batcher = Batcher::start_with(writer, queue_capacity);
    (batcher, writes, confirm)
}

/// The next batch written.
async fn next_write(writes: &mut mpsc::Receiver<Written>) -> Written {
    timeout(PATIENCE, writes.recv())
        .await
        .expect("a batch is written in time")
        .expect("the batcher is running")
}

/// The answer a waiter gets.
async fn answer(waiter: Answer) -> Result<Outcome> {
    timeout(PATIENCE, waiter)
        .await
        .expect("the waiter is answered in time")
        .expect("the waiter is answered, not dropped")
}

/// Waits until the batching task has taken every submitted proposal off the queue.
async fn until_dequeued(batcher: &Batcher) {
    timeout(PATIENCE, async {
        while batcher.queue.capacity() < batcher.queue.max_capacity() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the batching task takes the queued proposals in time");
}

/// Submits a SET of `key`.
fn submit_all(batcher: &Batcher, keys: &[&str]) -> Vec<Answer> {
    keys.iter().map(|key| submit(batcher, key)).collect()
}

fn submit(batcher: &Batcher, key: &str) -> Answer {
    batcher.submit(set(key)).expect("proposal queued")
}

/// A SET of `key`, as a leader stamps it.
fn set(key: &str) -> Proposal {
    set_value(key, b"value".to_vec())
}

/// A SET of `key` to `value`, as a leader stamps it.
fn set_value(key: &str, value: Vec<u8>) -> Proposal {
    Proposal {
        stamp: Hlc::new(1_700_000_000_000, 0, "test"),
        wall_ms: 1_700_000_000_000,
        request: None,
        mutation: Mutation::Set {
            key: key.as_bytes().to_vec(),
            value,
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
        token_seed: None,
    }
}

/// The key of a SET proposal.
fn key_of(proposal: &Proposal) -> String {
    match &proposal.mutation {
        Mutation::Set { key, .. } => String::from_utf8_lossy(key).into_owned(),
        other => panic!("not a SET: {other:?}"),
    }
}

/// An outcome told apart from others by `n`.
fn stored(n: u64) -> Outcome {
    Outcome::Stored {
        version: Hlc::new(n, 0, "test"),
    }
}

/// Occupies every pipeline slot with a batch of one; returns those waiters and batches.
async fn fill_slots(
    batcher: &Batcher,
    writes: &mut mpsc::Receiver<Written>,
) -> Vec<(Answer, Written)> {
    let mut busy = Vec::new();
    for i in 0..MAX_BATCHES_IN_FLIGHT {
        let key = format!("busy{i}");
        let waiter = submit(batcher, &key);
        let written = next_write(writes).await;
        assert_eq!(written.keys(), [key]);
        busy.push((waiter, written));
    }
    busy
}

#[tokio::test(flavor = "current_thread")]
async fn a_lone_proposal_is_written_at_once_as_a_batch_of_one() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let waiter = submit(&batcher, "a");
    let written = next_write(&mut writes).await;
    assert_eq!(written.keys(), ["a"]);
    written.complete(Ok(vec![stored(1)]));
    assert_eq!(answer(waiter).await.expect("applied"), stored(1));
}

#[tokio::test(flavor = "current_thread")]
async fn with_every_slot_busy_proposals_wait_then_go_out_as_one_batch_in_order() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let mut busy = fill_slots(&batcher, &mut writes).await;

    // The batching task takes the first waiting proposal and blocks on the pipeline...
    let mut waiters = vec![submit(&batcher, "w0")];
    until_dequeued(&batcher).await;
    // ...while more arrive.
    for i in 1..5 {
        waiters.push(submit(&batcher, &format!("w{i}")));
    }
    tokio::task::yield_now().await;
    assert!(
        writes.try_recv().is_err(),
        "nothing is written while every slot is busy"
    );

    // One slot frees: everything that waited goes out together, in submission order.
    let (busy_waiter, busy_batch) = busy.remove(0);
    busy_batch.complete(Ok(vec![stored(100)]));
    assert_eq!(answer(busy_waiter).await.expect("applied"), stored(100));
    let written = next_write(&mut writes).await;
    assert_eq!(written.keys(), ["w0", "w1", "w2", "w3", "w4"]);

    written.complete(Ok((0..5).map(stored).collect()));
    for (i, waiter) in (0..).zip(waiters) {
        assert_eq!(answer(waiter).await.expect("applied"), stored(i));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn each_waiter_gets_its_own_outcome() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let waiters = submit_all(&batcher, &["a", "b", "c"]);
    let written = next_write(&mut writes).await;
    assert_eq!(written.keys(), ["a", "b", "c"]);
    let outcomes = vec![stored(10), Outcome::Missing, stored(30)];
    written.complete(Ok(outcomes.clone()));
    for (waiter, expected) in waiters.into_iter().zip(outcomes) {
        assert_eq!(answer(waiter).await.expect("applied"), expected);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_error_reaches_every_waiter_of_that_batch_only() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let failing = submit_all(&batcher, &["x0", "x1", "x2"]);
    let failing_batch = next_write(&mut writes).await;
    assert_eq!(failing_batch.keys(), ["x0", "x1", "x2"]);
    let fine = submit_all(&batcher, &["y0", "y1"]);
    let fine_batch = next_write(&mut writes).await;
    assert_eq!(fine_batch.keys(), ["y0", "y1"]);

    failing_batch.complete(Err(Error::NotLeader { leader: Some(2) }));
    fine_batch.complete(Ok(vec![stored(1), stored(2)]));

    for waiter in failing {
        let answer = answer(waiter).await;
        assert!(
            matches!(answer, Err(Error::NotLeader { leader: Some(2) })),
            "{answer:?}"
        );
    }
    for (i, waiter) in (1..).zip(fine) {
        assert_eq!(answer(waiter).await.expect("applied"), stored(i));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_outcome_count_mismatch_fails_every_waiter_and_frees_the_slot() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let waiters = submit_all(&batcher, &["a", "b", "c"]);
    let written = next_write(&mut writes).await;
    written.complete(Ok(vec![stored(1), stored(2)]));
    for waiter in waiters {
        let answer = answer(waiter).await;
        assert!(
            matches!(&answer, Err(Error::Stopped(m)) if m.to_string().contains("3 proposals got 2 outcomes")),
            "{answer:?}"
        );
    }

    // The batcher carries on, with every slot (none was leaked by the failed batch).
    let mut busy = fill_slots(&batcher, &mut writes).await;
    let last = submit(&batcher, "last");
    let (busy_waiter, busy_batch) = busy.remove(0);
    busy_batch.complete(Ok(vec![stored(0)]));
    assert_eq!(answer(busy_waiter).await.expect("applied"), stored(0));
    let written = next_write(&mut writes).await;
    assert_eq!(written.keys(), ["last"]);
    written.complete(Ok(vec![stored(4)]));
    assert_eq!(answer(last).await.expect("applied"), stored(4));
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_refuses_with_overloaded_and_accepts_again_once_drained() {
    let (batcher, mut writes) = start(2);
    let a = submit(&batcher, "a");
    let b = submit(&batcher, "b");
    let refused = batcher.submit(set("c"));
    assert!(matches!(refused, Err(Error::Overloaded)), "{refused:?}");

    // The batching task drains the queue into a batch; the queue has room again.
    let written = next_write(&mut writes).await;
    assert_eq!(written.keys(), ["a", "b"]);
    let c = submit(&batcher, "c");
    let later = next_write(&mut writes).await;
    assert_eq!(later.keys(), ["c"]);

    written.complete(Ok(vec![stored(1), stored(2)]));
    later.complete(Ok(vec![stored(3)]));
    assert_eq!(answer(a).await.expect("applied"), stored(1));
    assert_eq!(answer(b).await.expect("applied"), stored(2));
    assert_eq!(answer(c).await.expect("applied"), stored(3));
}

#[tokio::test(flavor = "current_thread")]
async fn a_large_backlog_is_split_into_batches_of_at_most_max_batch_proposals_in_order() {
    let total = 2 * MAX_BATCH_PROPOSALS + 5;
    assert!(total <= MAX_QUEUED_PROPOSALS);
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    let keys: Vec<String> = (0..total).map(|i| format!("k{i:05}")).collect();
    let waiters: Vec<Answer> = keys.iter().map(|key| submit(&batcher, key)).collect();

    let mut batches = Vec::new();
    for _ in 0..3 {
        batches.push(next_write(&mut writes).await);
    }
    until_dequeued(&batcher).await;
    assert!(writes.try_recv().is_err(), "three batches hold the backlog");
    let sizes: Vec<usize> = batches.iter().map(|b| b.proposals.len()).collect();
    assert_eq!(sizes, [MAX_BATCH_PROPOSALS, MAX_BATCH_PROPOSALS, 5]);
    let written: Vec<String> = batches.iter().flat_map(Written::keys).collect();
    assert_eq!(written, keys);

    let mut next = 0;
    for batch in batches {
        let outcomes = (next..next + batch.proposals.len() as u64).map(stored);
        next += batch.proposals.len() as u64;
        batch.complete(Ok(outcomes.collect()));
    }
    for (i, waiter) in (0..).zip(waiters) {
        assert_eq!(answer(waiter).await.expect("applied"), stored(i));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_value_past_max_batch_bytes_goes_alone() {
    let (batcher, mut writes) = start(MAX_QUEUED_PROPOSALS);
    batcher
        .submit(set_value("big", vec![0; MAX_BATCH_BYTES]))
        .expect("proposal queued");
    let _small = submit(&batcher, "small0");
    let _other = submit(&batcher, "small1");
    assert_eq!(next_write(&mut writes).await.keys(), ["big"]);
    assert_eq!(next_write(&mut writes).await.keys(), ["small0", "small1"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_refused_for_a_lapsed_lease_is_written_again_once_a_quorum_confirms() {
    let (batcher, mut writes, confirm) = start_confirming(MAX_QUEUED_PROPOSALS);
    let waiters = submit_all(&batcher, &["a", "b"]);
    let refused = next_write(&mut writes).await;
    refused.complete(Err(Error::LeaseExpired));
    tokio::task::yield_now().await;
    assert!(
        writes.try_recv().is_err(),
        "nothing is written again before a quorum confirms the leadership"
    );
    confirm.send(Ok(())).await.expect("confirm");
    let again = next_write(&mut writes).await;
    assert_eq!(again.keys(), ["a", "b"]);
    again.complete(Ok(vec![stored(1), stored(2)]));
    for (i, waiter) in (1..).zip(waiters) {
        assert_eq!(answer(waiter).await.expect("applied"), stored(i));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_rewritten_batch_leaves_out_the_proposals_nobody_waits_for() {
    let (batcher, mut writes, confirm) = start_confirming(MAX_QUEUED_PROPOSALS);
    let mut waiters = submit_all(&batcher, &["a", "b", "c"]);
    let refused = next_write(&mut writes).await;
    drop(waiters.remove(1)); // b's requester gave up
    refused.complete(Err(Error::LeaseExpired));
    confirm.send(Ok(())).await.expect("confirm");
    let again = next_write(&mut writes).await;
    assert_eq!(again.keys(), ["a", "c"]);
    again.complete(Ok(vec![stored(1), stored(3)]));
    assert_eq!(answer(waiters.remove(0)).await.expect("applied"), stored(1));
    assert_eq!(answer(waiters.remove(0)).await.expect("applied"), stored(3));
}

#[tokio::test(flavor = "current_thread")]
async fn a_lapsed_lease_that_turns_out_lost_fails_the_batch_as_not_leader() {
    let (batcher, mut writes, confirm) = start_confirming(MAX_QUEUED_PROPOSALS);
    let waiters = submit_all(&batcher, &["a", "b"]);
    next_write(&mut writes)
        .await
        .complete(Err(Error::LeaseExpired));
    confirm
        .send(Err(Error::NotLeader { leader: Some(3) }))
        .await
        .expect("confirm");
    for waiter in waiters {
        let answer = answer(waiter).await;
        assert!(
            matches!(answer, Err(Error::NotLeader { leader: Some(3) })),
            "{answer:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_refused_batch_nobody_waits_for_is_dropped_and_frees_its_slot() {
    let (batcher, mut writes, confirm) = start_confirming(MAX_QUEUED_PROPOSALS);
    let waiters = submit_all(&batcher, &["a", "b"]);
    let refused = next_write(&mut writes).await;
    drop(waiters);
    refused.complete(Err(Error::LeaseExpired));
    confirm.send(Ok(())).await.expect("confirm");
    // Every slot is usable again, and nothing of the dropped batch is written.
    let busy = fill_slots(&batcher, &mut writes).await;
    assert_eq!(busy.len(), MAX_BATCHES_IN_FLIGHT);
}
