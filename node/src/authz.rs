//! Key-level authorization (issue 29): the policy in force, each identity's grants (cached,
//! bounded), and what each request needs. The rules themselves, their file format and matching
//! are `statestore_policy`'s; the file is followed by [`policy_file`].
//!
//! An open policy (no rules) allows everything without touching the cache. Otherwise a request
//! costs one lookup of its identity in [`GrantsCache`] and one check of its key or device; the
//! first request of an identity after a (re)load computes its grants.

pub mod grants_cache;
pub mod policy_file;

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use statestore_policy::{Grants, Policy};

use grants_cache::GrantsCache;

/// The policy in force and the grants of the identities seen since it was loaded.
#[derive(Debug)]
pub struct Authorizer {
    policy: RwLock<Arc<Policy>>,
    /// What an open policy grants, shared by every request.
    open: Arc<Grants>,
    cache: Mutex<GrantsCache>,
    metrics: AuthzMetrics,
}

impl Authorizer {
    /// Enforces `policy`, reporting in `metrics`.
    pub fn new(policy: Policy, metrics: AuthzMetrics) -> Authorizer {
        let open = Arc::new(Policy::open().grants(None));
        metrics.policy_rules.set(gauge_value(policy.rule_count()));
        Authorizer {
            policy: RwLock::new(Arc::new(policy)),
            open,
            cache: Mutex::new(GrantsCache::new(
                grants_cache::MAX_ENTRIES,
                grants_cache::MAX_BYTES,
            )),
            metrics,
        }
    }

    /// An authorizer that allows everything (no policy file), with unregistered metrics.
    pub fn open() -> Authorizer {
        Authorizer::new(Policy::open(), AuthzMetrics::new())
    }

    /// Whether every request is allowed (no rules).
    pub fn is_open(&self) -> bool {
        self.current().is_open()
    }

    /// The policy in force.
    pub fn current(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `policy` in force from the next request on; grants computed under the old one are
    /// dropped.
    pub fn replace(&self, policy: Policy) {
        let rules = policy.rule_count();
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
        cache.clear();
        self.metrics.policy_rules.set(gauge_value(rules));
        self.report(&cache);
    }

    /// What `identity` may do under the policy in force.
    pub fn grants(&self, identity: Option<&str>) -> Arc<Grants> {
        let policy = self.current();
        if policy.is_open() {
            return self.open.clone();
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(grants) = cache.get(identity) {
            return grants;
        }
        // A replace() since `policy` was read cleared the cache under this lock: computing
        // from the policy now in force keeps stale grants out of it.
        let policy = self.current();
        let grants = Arc::new(policy.grants(identity));
        cache.insert(identity, grants.clone());
        self.report(&cache);
        grants
    }

    /// Counts one reload of the policy file by `result` (`ok`, `error`).
    pub fn count_reload(&self, result: &'static str) {
        self.metrics
            .policy_reloads_total
            .with_label_values(&[result])
            .inc();
    }

    fn report(&self, cache: &GrantsCache) {
        self.metrics.grants_cached.set(gauge_value(cache.len()));
        self.metrics
            .grants_cached_bytes
            .set(gauge_value(cache.bytes()));
    }
}

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The `statestore_auth_*` metric families. Denied requests are counted with the other results
/// (`statestore_server_requests_total{result="not_authorized"}`, and the device-bound twin).
#[derive(Debug, Clone)]
pub struct AuthzMetrics {
    /// `statestore_auth_policy_rules`.
    pub policy_rules: IntGauge,
    /// `statestore_auth_policy_reloads_total{result}`.
    pub policy_reloads_total: IntCounterVec,
    /// `statestore_auth_grants_cached`.
    pub grants_cached: IntGauge,
    /// `statestore_auth_grants_cached_bytes`.
    pub grants_cached_bytes: IntGauge,
}

impl AuthzMetrics {
    /// The families, not registered anywhere.
    pub fn new() -> AuthzMetrics {
        let policy_reloads_total = IntCounterVec::new(
            Opts::new(
                "statestore_auth_policy_reloads_total",
                "Changes of the policy file seen, by result: ok (in force from the next \
                 request) or error (refused; the last good rules stay).",
            ),
            &["result"],
        )
        .unwrap_or_else(|err| panic!("metric definition: {err}"));
        for result in ["ok", "error"] {
            policy_reloads_total.with_label_values(&[result]);
        }
        AuthzMetrics {
            policy_rules: gauge(
                "statestore_auth_policy_rules",
                "Rules of the policy in force (0: every requester may do everything).",
            ),
            policy_reloads_total,
            grants_cached: gauge(
                "statestore_auth_grants_cached",
                "Identities whose grants under the policy in force are cached.",
            ),
            grants_cached_bytes: gauge(
                "statestore_auth_grants_cached_bytes",
                "Bytes the cached grants hold (capped; the oldest-inserted are dropped first).",
            ),
        }
    }

    /// The families, registered in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<AuthzMetrics> {
        let metrics = AuthzMetrics::new();
        registry.register(Box::new(metrics.policy_rules.clone()))?;
        registry.register(Box::new(metrics.policy_reloads_total.clone()))?;
        registry.register(Box::new(metrics.grants_cached.clone()))?;
        registry.register(Box::new(metrics.grants_cached_bytes.clone()))?;
        Ok(metrics)
    }
}

impl Default for AuthzMetrics {
    fn default() -> Self {
        AuthzMetrics::new()
    }
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap_or_else(|err| panic!("metric definition {name}: {err}"))
}

#[cfg(test)]
mod tests;
