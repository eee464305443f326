//! What applying one entry produced: the [`Outcome`] the client is answered with (and the reply
//! memory remembers), and the key events ([`Applied`]).

use crate::devicebound::DeviceOutcome;
use crate::keyspace::{self, KeyEvent};

/// Result of one entry, the same on every replica: a keyspace outcome, or what a device-bound
/// command did ([`keyspace::Outcome`] is the one flat enum the log and the reply memory encode).
pub type Outcome = keyspace::Outcome<Box<DeviceOutcome>>;

/// Outcome plus notifications of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The reply-level result.
    pub outcome: Outcome,
    /// Changes for the notifier, in commit order.
    pub events: Vec<KeyEvent>,
}
