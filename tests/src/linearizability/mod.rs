//! Linearizability checking of recorded state store client histories: Porcupine's algorithm
//! (Wing & Gong / Lowe's just-in-time linearization with memoized (linearized set, state)
//! pairs), checked key by key against a sequential model of one key.
//!
//! - [`history`]: operations (client, key, call and return times in ns, request, reply or
//!   unknown outcome);
//! - [`model`]: what SET (NX/NEX), GET, DEL and VDEL do to one key;
//! - [`checker`]: the search, its [`Budget`] and its [`Verdict`];
//! - [`text`]: a one-operation-per-line text form for test tables and dumps.
//!
//! ```
//! use statestore_tests::linearizability::{check, Budget, Condition, Input, Operation, Output};
//!
//! let set = Input::Set { value: b"1".to_vec(), condition: Condition::Always };
//! let history = [
//!     Operation::returned(1, "k", set, 0, 10, Output::Set { applied: true }),
//!     Operation::returned(2, "k", Input::Get, 20, 30, Output::Get { value: None }),
//! ];
//! assert!(check(&history, Budget::default()).expect("valid").is_violation());
//! ```

pub mod checker;
pub mod history;
pub mod model;
pub mod text;

pub use checker::{Budget, Stats, Verdict, check, check_with_stats};
pub use history::{Condition, HistoryError, Input, Operation, Outcome, Output};
pub use text::{ParseError, parse_history, parse_operation};
