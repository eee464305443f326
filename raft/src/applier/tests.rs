//! Unit tests of the apply thread's stall meter.

use super::*;

fn stalls(metrics: &RaftStorageMetrics, phase: Phase) -> u64 {
    metrics
        .apply_stall_seconds
        .with_label_values(&[phase.label()])
        .get_sample_count()
}

#[test]
fn a_phase_that_lasts_the_stall_time_is_counted_under_its_own_label() {
    let metrics = RaftStorageMetrics::default();
    let mut progress = Progress::start(&metrics, Phase::MemtableRoom);
    std::thread::sleep(STALL + Duration::from_millis(10));
    progress.step(Phase::Apply);
    assert_eq!(stalls(&metrics, Phase::MemtableRoom), 1);
    assert_eq!(
        stalls(&metrics, Phase::Apply),
        0,
        "the next phase has only begun"
    );
    let observed = metrics
        .apply_stall_seconds
        .with_label_values(&[Phase::MemtableRoom.label()])
        .get_sample_sum();
    assert!(observed >= STALL.as_secs_f64(), "{observed}");
}

#[test]
fn every_phase_has_its_own_label() {
    let labels: std::collections::BTreeSet<_> = Phase::ALL.iter().map(|p| p.label()).collect();
    assert_eq!(labels.len(), Phase::ALL.len());
}
