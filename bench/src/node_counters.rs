//! A few Prometheus counters of the statestore nodes, read from `/metrics` at phase boundaries
//! and reported as their increase during each phase, summed over the nodes: why requests got
//! no reply (`statestore_server_requests_dropped_total{reason}`), what the device-bound
//! service answered (`statestore_devicebound_requests_total{command,result}`), message
//! transitions (`statestore_devicebound_messages_total{transition}`: delivered, undelivered
//! after a PUBACK 0x10, completed, ...), lock expiries, dropped device publishes, offline
//! backoffs and leader takeovers. All of them are counted by the node that proposed or answered,
//! i.e. the serving leader, so the sum over nodes counts each event once.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::processes::StatestoreCluster;

/// The counter families read.
pub const WATCHED: &[&str] = &[
    "statestore_server_requests_dropped_total",
    "statestore_devicebound_requests_total",
    "statestore_devicebound_messages_total",
    "statestore_devicebound_lock_expiries_total",
    "statestore_devicebound_device_publishes_dropped_total",
    "statestore_devicebound_offline_backoffs_total",
    "statestore_leader_takeovers_total",
];

/// Series (`name{labels}`) → value.
pub type Counters = BTreeMap<String, f64>;

/// The series of the families `names` in Prometheus text `text`.
pub fn parse(text: &str, names: &[&str]) -> Counters {
    let mut out = Counters::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        if !names.contains(&name) {
            continue;
        }
        if let Ok(value) = value.parse::<f64>() {
            *out.entry(series.to_owned()).or_default() += value;
        }
    }
    out
}

/// `after − before` per series, leaving out series that did not move.
pub fn increase(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .filter_map(|(series, value)| {
            let delta = value - before.get(series).copied().unwrap_or(0.0);
            (delta != 0.0).then(|| (series.clone(), delta))
        })
        .collect()
}

/// The watched counters summed over every node that answers.
pub async fn snapshot(cluster: &StatestoreCluster) -> Counters {
    snapshot_of(cluster, WATCHED).await
}

/// The counter families `names` summed over every node that answers.
pub async fn snapshot_of(cluster: &StatestoreCluster, names: &[&str]) -> Counters {
    let mut total = Counters::new();
    for i in 0..cluster.nodes.len() {
        if let Ok(text) = cluster.metrics_text(i).await {
            for (series, value) in parse(&text, names) {
                *total.entry(series).or_default() += value;
            }
        }
    }
    total
}

/// How the counters moved during one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseCounters {
    /// `2 SEND`.
    pub phase: String,
    /// Series that moved, and by how much.
    pub increase: Counters,
}

impl PhaseCounters {
    /// `requests_dropped_total{reason="timed_out"} +509, ...` without the `statestore_` prefix.
    pub fn line(&self) -> String {
        if self.increase.is_empty() {
            return "none moved".to_owned();
        }
        self.increase
            .iter()
            .map(|(series, delta)| {
                format!(
                    "{} +{delta:.0}",
                    series.strip_prefix("statestore_").unwrap_or(series)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP statestore_server_requests_dropped_total Requests dropped.\n\
        # TYPE statestore_server_requests_dropped_total counter\n\
        statestore_server_requests_dropped_total{reason=\"overloaded\"} 3\n\
        statestore_server_requests_dropped_total{reason=\"timed_out\"} 509\n\
        statestore_server_requests_total{result=\"ok\"} 100\n\
        statestore_leader_takeovers_total 1\n\
        statestore_devicebound_requests_total{command=\"send\",result=\"ok\"} 7.5e1\n\
        garbage line\n";

    #[test]
    fn only_the_watched_families_are_read() {
        let counters = parse(TEXT, WATCHED);
        let expected: Vec<(&str, f64)> = vec![
            (
                r#"statestore_devicebound_requests_total{command="send",result="ok"}"#,
                75.0,
            ),
            ("statestore_leader_takeovers_total", 1.0),
            (
                r#"statestore_server_requests_dropped_total{reason="overloaded"}"#,
                3.0,
            ),
            (
                r#"statestore_server_requests_dropped_total{reason="timed_out"}"#,
                509.0,
            ),
        ];
        let got: Vec<(&str, f64)> = counters.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got, expected);
        assert!(parse("", WATCHED).is_empty());
    }

    #[test]
    fn increases_leave_out_what_did_not_move() {
        let before = parse(TEXT, WATCHED);
        let mut after = before.clone();
        after.insert(
            r#"statestore_server_requests_dropped_total{reason="timed_out"}"#.to_owned(),
            600.0,
        );
        after.insert(
            "statestore_devicebound_offline_backoffs_total".to_owned(),
            4.0,
        );
        let phase = PhaseCounters {
            phase: "2 SEND".to_owned(),
            increase: increase(&before, &after),
        };
        assert_eq!(
            phase.line(),
            r#"devicebound_offline_backoffs_total +4, server_requests_dropped_total{reason="timed_out"} +91"#
        );
        let idle = PhaseCounters {
            phase: "idle".to_owned(),
            increase: increase(&before, &before),
        };
        assert_eq!(idle.line(), "none moved");
    }
}
