//! The answer writer against answers that never come, installs that take long, peers that are
//! gone, and what it may still send once the reader stopped. Time is tokio's paused clock: the
//! deadlines pass in no real time.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::mpsc::{UnboundedReceiver, unbounded};
use tokio::sync::mpsc;

use super::{
    ANSWER_DEADLINE, DRAIN_GRACE, Pending, ReadEnd, WriterEnd, write_answers, writer_grace,
};
use crate::error::PeerError;
use crate::network::protocol::{self, Response};

fn refused(text: &str) -> Response {
    Response::Refused(text.to_owned())
}

/// Queues a refusal known now; `close` ends the connection after it.
async fn queue_refusal(queue: &mpsc::Sender<Pending>, text: &str, close: bool) {
    queue
        .send(Pending::Now {
            response: refused(text),
            close,
        })
        .await
        .expect("queued");
}

/// The texts of the refusals the writer sent, in order.
fn sent(mut frames: UnboundedReceiver<Bytes>) -> Vec<String> {
    let mut texts = Vec::new();
    while let Ok(frame) = frames.try_recv() {
        match protocol::decode::<Response>("response", &BytesMut::from(frame)) {
            Ok(Response::Refused(text)) => texts.push(text),
            Ok(_) => panic!("an answer that is not a refusal"),
            Err(e) => panic!("an undecodable frame: {e}"),
        }
    }
    texts
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_never_comes_closes_the_connection_at_the_deadline() {
    let (queue, pending) = mpsc::channel(8);
    let (sink, frames) = unbounded();
    queue_refusal(&queue, "first", false).await;
    queue
        .send(Pending::Task(tokio::spawn(std::future::pending())))
        .await
        .expect("queued");
    queue_refusal(&queue, "after the stuck one", false).await;
    let started = tokio::time::Instant::now();
    let end = tokio::time::timeout(
        ANSWER_DEADLINE * 10,
        write_answers(pending, sink, ANSWER_DEADLINE),
    )
    .await
    .expect("the writer gives up on a stuck answer");
    assert_eq!(end, WriterEnd::Overdue);
    assert_eq!(started.elapsed(), ANSWER_DEADLINE);
    // Answers after the stuck one are not sent out of order.
    assert_eq!(sent(frames), ["first"]);
    drop(queue);
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_install_is_waited_for_past_the_deadline() {
    let (queue, pending) = mpsc::channel(8);
    let (sink, frames) = unbounded();
    let install_takes = ANSWER_DEADLINE * 4;
    queue
        .send(Pending::Install(tokio::spawn(async move {
            tokio::time::sleep(install_takes).await;
            refused("installed")
        })))
        .await
        .expect("queued");
    drop(queue);
    let end = write_answers(pending, sink, ANSWER_DEADLINE).await;
    assert_eq!(end, WriterEnd::Drained);
    assert_eq!(sent(frames), ["installed"]);
}

#[tokio::test(start_paused = true)]
async fn answers_go_out_in_order_and_a_closing_one_ends_the_writer() {
    let (queue, pending) = mpsc::channel(8);
    let (sink, frames) = unbounded();
    queue
        .send(Pending::Task(tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            refused("slow task")
        })))
        .await
        .expect("queued");
    queue_refusal(&queue, "closing", true).await;
    queue_refusal(&queue, "never", false).await;
    let end = write_answers(pending, sink, ANSWER_DEADLINE).await;
    assert_eq!(end, WriterEnd::Closing);
    assert_eq!(sent(frames), ["slow task", "closing"]);
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_is_gone_ends_the_writer() {
    let (queue, pending) = mpsc::channel(8);
    let (sink, frames) = unbounded();
    drop(frames);
    queue_refusal(&queue, "to nobody", false).await;
    let end = write_answers(pending, sink, ANSWER_DEADLINE).await;
    assert_eq!(end, WriterEnd::PeerGone);
    drop(queue);
}

#[test]
fn the_writer_stops_at_once_when_the_peer_closed_and_drains_a_refusal_otherwise() {
    let closed: Result<ReadEnd, PeerError> = Ok(ReadEnd::PeerClosed);
    let broken: Result<ReadEnd, PeerError> = Err(PeerError::ReadRequest(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    )));
    let pipeline_ended: Result<ReadEnd, PeerError> = Ok(ReadEnd::PipelineEnded);
    let refused_request: Result<ReadEnd, PeerError> = Err(PeerError::SecondHello);
    assert_eq!(writer_grace(&closed), Duration::ZERO);
    assert_eq!(writer_grace(&broken), Duration::ZERO);
    assert_eq!(writer_grace(&pipeline_ended), DRAIN_GRACE);
    assert_eq!(writer_grace(&refused_request), DRAIN_GRACE);
}
