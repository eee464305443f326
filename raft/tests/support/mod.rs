//! Helpers shared by the raft crate's integration tests.

use prometheus::Registry;

/// The counter `family{label="value"}` as read from `registry` (summed over its other labels).
pub fn counter(registry: &Registry, family: &str, label: &str, value: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|gathered| gathered.name() == family)
        .flat_map(|gathered| gathered.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|l| l.name() == label && l.value() == value)
        })
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}
