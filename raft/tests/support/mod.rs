//! Helpers shared by the raft crate's integration tests.

use prometheus::Registry;

/// The counter `family{label="value"}` as read from `registry` (summed over its other labels).
#[allow(dead_code)] // each test binary compiles this module; not all of them read counters
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

/// The gauge `family` (with `label="value"` when given) as read from `registry`; `None` when
/// the registry has no such series.
#[allow(dead_code)] // each test binary compiles this module; not all of them read gauges
pub fn gauge(registry: &Registry, family: &str, label: Option<(&str, &str)>) -> Option<i64> {
    registry
        .gather()
        .iter()
        .filter(|gathered| gathered.name() == family)
        .flat_map(|gathered| gathered.get_metric())
        .find(|metric| {
            label.is_none_or(|(name, value)| {
                metric
                    .get_label()
                    .iter()
                    .any(|l| l.name() == name && l.value() == value)
            })
        })
        .map(|metric| metric.get_gauge().get_value() as i64)
}
