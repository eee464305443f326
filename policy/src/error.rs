//! The crate's one error: why a policy text was refused, and where.

use crate::MAX_POLICY_BYTES;

/// Most characters of a value (a key, a principal, ...) quoted in a message.
pub(crate) const MAX_QUOTED_CHARS: usize = 100;

/// Most characters of a message from the TOML parser or serde (which may quote the input).
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

/// Why [`Policy::parse`](crate::Policy::parse) refused a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The text is longer than [`MAX_POLICY_BYTES`].
    #[error("policy is {bytes} bytes, more than the limit of {MAX_POLICY_BYTES}")]
    TooLarge {
        /// The text's length.
        bytes: usize,
    },
    /// The text is not TOML, or its top level is not `[groups]`, `[[state_store]]` and
    /// `[[devicebound]]` (lines and columns count from 1).
    #[error("invalid TOML at line {line}, column {column}: {message}")]
    Toml {
        /// The line of the problem.
        line: usize,
        /// The column (in characters) of the problem.
        column: usize,
        /// The parser's message, cut to 300 characters.
        message: String,
    },
    /// A rule, group or list is invalid or exceeds a limit.
    #[error("{at}: {reason}")]
    Invalid {
        /// Where: `state_store[3].keys[1] (line 12)`, `groups."operators"[2]`, `policy`.
        at: String,
        /// What is wrong, quoting the bad value (cut to 100 characters).
        reason: String,
    },
}

impl PolicyError {
    pub(crate) fn invalid(at: impl Into<String>, reason: impl Into<String>) -> PolicyError {
        PolicyError::Invalid {
            at: at.into(),
            reason: reason.into(),
        }
    }
}

/// `value` in double quotes, with control characters, quotes and backslashes escaped, cut to
/// [`MAX_QUOTED_CHARS`] characters (then followed by `…`).
pub(crate) fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len().min(4 * MAX_QUOTED_CHARS) + 2);
    quoted.push('"');
    let mut characters = value.chars();
    for character in characters.by_ref().take(MAX_QUOTED_CHARS) {
        quoted.extend(character.escape_debug());
    }
    quoted.push('"');
    if characters.next().is_some() {
        quoted.push('…');
    }
    quoted
}

/// `message` cut to [`MAX_MESSAGE_CHARS`] characters (then followed by `…`), on one line: a
/// line break becomes `; `, other control characters are escaped.
pub(crate) fn cut_message(message: &str) -> String {
    let message = message.trim();
    let mut cut = String::with_capacity(message.len().min(4 * MAX_MESSAGE_CHARS));
    let mut characters = message.chars();
    for character in characters.by_ref().take(MAX_MESSAGE_CHARS) {
        if character == '\n' {
            cut.push_str("; ");
        } else if character.is_control() {
            cut.extend(character.escape_debug());
        } else {
            cut.push(character);
        }
    }
    if characters.next().is_some() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests;
