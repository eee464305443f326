//! `auth.policy_file`: read at start (an unusable file stops the node), then checked every
//! `auth.policy_reload_interval_ms`: a valid change is in force from the next request (INFO), an
//! invalid one is refused and the last good rules stay (WARN); both are counted in
//! `statestore_auth_policy_reloads_total`. The file is read whole, at most
//! [`MAX_POLICY_BYTES`], on the blocking pool; an unchanged file is not parsed again.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use statestore_policy::{MAX_POLICY_BYTES, Policy};
use tokio::sync::watch;

use super::Authorizer;
use crate::error::{NodeError, PolicyFileError};

/// The policy in `path` and the bytes it was read from.
pub fn load(path: &Path) -> Result<(Policy, Vec<u8>), NodeError> {
    let fail = |reason: PolicyFileError| NodeError::Policy {
        path: path.to_owned(),
        reason,
    };
    let bytes = read(path).map_err(fail)?;
    let policy = parse(&bytes).map_err(fail)?;
    Ok((policy, bytes))
}

fn read(path: &Path) -> Result<Vec<u8>, PolicyFileError> {
    let limit = u64::try_from(MAX_POLICY_BYTES).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_POLICY_BYTES {
        return Err(PolicyFileError::TooLarge);
    }
    Ok(bytes)
}

fn parse(bytes: &[u8]) -> Result<Policy, PolicyFileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| PolicyFileError::NotText)?;
    Ok(Policy::parse(text)?)
}

/// The outcome of one look at the file.
#[derive(Debug)]
pub enum Check {
    /// The same bytes as last time, or unreadable as last time.
    Unchanged,
    /// Changed and valid: this policy.
    Changed(Policy),
    /// Changed but unusable.
    Refused(PolicyFileError),
}

/// What the file held at the last look: its bytes, or `None` when it could not be read (so an
/// unreadable file is reported once, not at every look).
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    seen: Mutex<Option<Vec<u8>>>,
}

impl Follower {
    /// Follows `path`, last seen holding `bytes`.
    pub fn new(path: PathBuf, bytes: Vec<u8>) -> Follower {
        Follower {
            path,
            seen: Mutex::new(Some(bytes)),
        }
    }

    /// Reads the file again (blocking IO) and says whether it changed and how.
    pub fn check(&self) -> Check {
        let read = read(&self.path);
        let now = read.as_ref().ok().cloned();
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == now {
                return Check::Unchanged;
            }
            *seen = now;
        }
        match read.and_then(|bytes| parse(&bytes)) {
            Ok(policy) => Check::Changed(policy),
            Err(err) => Check::Refused(err),
        }
    }

    /// The file followed.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Checks the file every `interval` until `stop`, putting each valid change in force.
pub async fn follow(
    follower: Follower,
    authorizer: Arc<Authorizer>,
    interval: Duration,
    stop: watch::Receiver<bool>,
) {
    let follower = Arc::new(follower);
    let path = follower.path().display().to_string();
    let check = move || follower.check();
    crate::file_watch::check_every(interval, stop, check, |outcome| match outcome {
        Check::Unchanged => {}
        Check::Changed(policy) => {
            let rules = policy.rule_count();
            let open = policy.is_open();
            authorizer.replace(policy);
            authorizer.count_reload("ok");
            if open {
                tracing::warn!(path, "policy file changed and holds no rules: every requester may now do everything");
            } else {
                tracing::info!(path, rules, "policy file changed: the new rules apply from the next request");
            }
        }
        Check::Refused(err) => {
            authorizer.count_reload("error");
            tracing::warn!(path, error = %err, "policy file changed but cannot be used; keeping the last good rules");
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
