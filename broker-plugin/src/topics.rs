//! Topics: which publishes are store requests (MQTT topic filters, `+` and `#`, matched as the
//! broker does), and whether a response topic lies inside a client's own `clients/<id>/`.

use crate::options::MAX_NAME_BYTES;

/// A checked MQTT topic filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicFilter(String);

/// Why a topic filter was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterError {
    /// Empty, longer than [`MAX_NAME_BYTES`], or with a NUL.
    Length,
    /// `#` not alone as the last level, or `+` not alone in its level.
    Wildcard,
}

impl TopicFilter {
    /// Checks `filter` as MQTT 5 §4.7.1 does.
    pub fn parse(filter: &str) -> Result<TopicFilter, FilterError> {
        if filter.is_empty() || filter.len() > MAX_NAME_BYTES || filter.contains('\0') {
            return Err(FilterError::Length);
        }
        let levels: Vec<&str> = filter.split('/').collect();
        let last = levels.len() - 1;
        for (i, level) in levels.iter().enumerate() {
            let multi = level.contains('#');
            let single = level.contains('+');
            if (multi && (*level != "#" || i != last)) || (single && *level != "+") {
                return Err(FilterError::Wildcard);
            }
        }
        Ok(TopicFilter(filter.to_string()))
    }

    /// The filter as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the topic `topic` (a publish topic: no wildcards) matches. As in MQTT, a filter
    /// starting with a wildcard does not match a topic starting with `$`.
    pub fn matches(&self, topic: &str) -> bool {
        if topic.starts_with('$') && (self.0.starts_with('+') || self.0.starts_with('#')) {
            return false;
        }
        let mut filter = self.0.split('/');
        let mut levels = topic.split('/');
        loop {
            match (filter.next(), levels.next()) {
                (Some("#"), _) => return true,
                (Some("+"), Some(_)) => {}
                (Some(f), Some(t)) if f == t => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }
}

/// Whether `topic` is one of the store's request topics.
pub fn is_request(filters: &[TopicFilter], topic: &str) -> bool {
    filters.iter().any(|f| f.matches(topic))
}

/// Whether `response_topic` lies inside `clients/<client_id>/`: it starts with that prefix,
/// has at least one more level after it, and has no wildcard (a response topic is a publish
/// topic). A client id with `/`, `+`, `#` or NUL, or an empty one, has no such prefix of its
/// own (`a` would otherwise own `clients/a/b/`, the prefix of client `a/b`): nothing is inside.
pub fn response_topic_inside(client_id: &str, response_topic: &str) -> bool {
    if client_id.is_empty() || client_id.contains(['/', '+', '#', '\0']) {
        return false;
    }
    if response_topic.contains(['+', '#', '\0']) {
        return false;
    }
    let Some(rest) = response_topic
        .strip_prefix("clients/")
        .and_then(|r| r.strip_prefix(client_id))
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    !rest.is_empty()
}

#[cfg(test)]
mod tests;
