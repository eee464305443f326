use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

#[tokio::test]
async fn checks_every_interval_until_stopped_and_hands_over_each_outcome() {
    tokio::time::pause();
    let (stop_tx, stop) = watch::channel(false);
    let checks = Arc::new(AtomicU32::new(0));
    let counted = checks.clone();
    let (seen_tx, mut seen) = tokio::sync::mpsc::channel(16);
    let task = tokio::spawn(check_every(
        Duration::from_secs(1),
        stop,
        move || counted.fetch_add(1, Ordering::SeqCst) + 1,
        move |n| {
            let _ = seen_tx.try_send(n);
        },
    ));
    for expected in 1..=3 {
        assert_eq!(seen.recv().await, Some(expected), "check {expected}");
    }
    stop_tx.send(true).expect("the task listens");
    task.await.expect("ends without panicking");
    assert!(
        checks.load(Ordering::SeqCst) <= 4,
        "no check after the stop"
    );
}

#[tokio::test]
async fn a_check_that_panics_is_skipped() {
    tokio::time::pause();
    let (stop_tx, stop) = watch::channel(false);
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let (seen_tx, mut seen) = tokio::sync::mpsc::channel(16);
    let task = tokio::spawn(check_every(
        Duration::from_millis(100),
        stop,
        move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(n != 1, "the first check fails");
            n
        },
        move |n| {
            let _ = seen_tx.try_send(n);
        },
    ));
    assert_eq!(
        seen.recv().await,
        Some(2),
        "the second check's outcome arrives"
    );
    stop_tx.send(true).expect("the task listens");
    task.await.expect("ends without panicking");
}
