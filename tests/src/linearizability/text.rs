//! A small line-oriented text form of histories, for test tables and for dumping recorded
//! histories: one operation per line, parsed by [`parse_operation`] and written by
//! [`Operation`]'s `Display`.
//!
//! ```text
//! # client call return VERB key [value] [NX|NEX] -> reply
//! c1 0 10 SET k v1 -> OK
//! c2 5 12 SET k v2 NX -> -1        # condition failed (wire `:-1`)
//! c3 20 30 GET k -> v1
//! c3 40 50 GET k -> nil            # no such key
//! c1 15 25 DEL k -> 1
//! c2 30 35 VDEL k v1 -> -1
//! c4 8 ? SET k v3 -> ?             # no reply: unknown outcome
//! ```
//!
//! Times are integers; `?` as the return time (and reply) marks an unknown outcome. Verbs and
//! conditions are case-insensitive. Keys and values are bare tokens, or double-quoted with
//! `\"`, `\\`, `\n`, `\r`, `\t` and `\xNN` escapes (`""` is the empty value; `"nil"` is the
//! three-byte value, bare `nil` the missing one). `#` outside quotes starts a comment.

use std::fmt;

use super::history::{Condition, Input, Operation, Outcome, Output};

/// A history file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole history: one operation per line; blank and comment lines are skipped.
pub fn parse_history(text: &str) -> Result<Vec<Operation>, ParseError> {
    let mut history = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let parsed = parse_operation(line).map_err(|message| ParseError {
            line: number + 1,
            message,
        })?;
        history.extend(parsed);
    }
    Ok(history)
}

/// One token of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    bytes: Vec<u8>,
    quoted: bool,
}

impl Token {
    fn is(&self, word: &str) -> bool {
        !self.quoted && self.bytes.eq_ignore_ascii_case(word.as_bytes())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    fn number<T: std::str::FromStr>(&self, what: &str) -> Result<T, String> {
        std::str::from_utf8(&self.bytes)
            .ok()
            .filter(|_| !self.quoted)
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| format!("{what}: expected a number, got {:?}", self.text()))
    }
}

/// Splits a line into tokens; `#` outside quotes ends it.
fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None | Some('#') => return Ok(tokens),
            Some('"') => {
                chars.next();
                let mut bytes = Vec::new();
                loop {
                    match chars.next() {
                        None => return Err("unterminated quoted token".to_owned()),
                        Some('"') => break,
                        Some('\\') => bytes.push(unescape(&mut chars)?),
                        Some(c) => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                    return Err("a quoted token must be followed by a space".to_owned());
                }
                tokens.push(Token {
                    bytes,
                    quoted: true,
                });
            }
            Some(_) => {
                let mut text = String::new();
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    text.push(c);
                }
                tokens.push(Token {
                    bytes: text.into_bytes(),
                    quoted: false,
                });
            }
        }
    }
}

fn unescape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<u8, String> {
    match chars.next() {
        Some('"') => Ok(b'"'),
        Some('\\') => Ok(b'\\'),
        Some('n') => Ok(b'\n'),
        Some('r') => Ok(b'\r'),
        Some('t') => Ok(b'\t'),
        Some('x') => {
            let hex: String = chars.by_ref().take(2).collect();
            u8::from_str_radix(&hex, 16).map_err(|_| format!("bad escape \\x{hex}"))
        }
        other => Err(format!("bad escape \\{}", other.unwrap_or(' '))),
    }
}

/// Parses one line: `Ok(None)` for a blank or comment line.
pub fn parse_operation(line: &str) -> Result<Option<Operation>, String> {
    let tokens = tokenize(line)?;
    if tokens.is_empty() {
        return Ok(None);
    }
    let arrow = tokens
        .iter()
        .position(|t| t.is("->"))
        .ok_or("missing `->` before the reply")?;
    let (request, reply) = (&tokens[..arrow], &tokens[arrow + 1..]);
    let [client, call, ret, verb, key, args @ ..] = request else {
        return Err("expected: client call return VERB key [args] -> reply".to_owned());
    };
    let client = match client.bytes.strip_prefix(b"c") {
        Some(digits) if !client.quoted => Token {
            bytes: digits.to_vec(),
            quoted: false,
        }
        .number("client")?,
        _ => {
            return Err(format!(
                "client: expected c<number>, got {:?}",
                client.text()
            ));
        }
    };
    let call: u64 = call.number("call time")?;
    let input = parse_input(verb, args)?;
    let [reply] = reply else {
        return Err("expected exactly one reply token after `->`".to_owned());
    };
    let outcome = match (ret.is("?"), reply.is("?")) {
        (true, true) => Outcome::Unknown,
        (false, false) => {
            let at: u64 = ret.number("return time")?;
            if at < call {
                return Err(format!("returns at {at}, before its call at {call}"));
            }
            let output = parse_output(&input, reply)?;
            Outcome::Returned { at, output }
        }
        _ => return Err("`?` must be both the return time and the reply".to_owned()),
    };
    Ok(Some(Operation {
        client,
        key: key.bytes.clone(),
        input,
        call,
        outcome,
    }))
}

fn parse_input(verb: &Token, args: &[Token]) -> Result<Input, String> {
    let verb_name = verb.text().to_ascii_uppercase();
    match (verb_name.as_str(), args) {
        ("SET", [value]) => Ok(Input::Set {
            value: value.bytes.clone(),
            condition: Condition::Always,
        }),
        ("SET", [value, condition]) => {
            let condition = if condition.is("NX") {
                Condition::Nx
            } else if condition.is("NEX") {
                Condition::Nex
            } else {
                return Err(format!("unknown SET condition {:?}", condition.text()));
            };
            Ok(Input::Set {
                value: value.bytes.clone(),
                condition,
            })
        }
        ("GET", []) => Ok(Input::Get),
        ("DEL", []) => Ok(Input::Del),
        ("VDEL", [value]) => Ok(Input::VDel {
            value: value.bytes.clone(),
        }),
        ("SET" | "GET" | "DEL" | "VDEL", _) => Err(format!("wrong arguments for {verb_name}")),
        _ => Err(format!("unknown verb {:?}", verb.text())),
    }
}

fn parse_output(input: &Input, reply: &Token) -> Result<Output, String> {
    match input {
        Input::Set { .. } if reply.is("OK") => Ok(Output::Set { applied: true }),
        Input::Set { .. } if reply.is("-1") => Ok(Output::Set { applied: false }),
        Input::Set { .. } => Err(format!(
            "SET reply must be OK or -1, got {:?}",
            reply.text()
        )),
        Input::Get if reply.is("nil") => Ok(Output::Get { value: None }),
        Input::Get => Ok(Output::Get {
            value: Some(reply.bytes.clone()),
        }),
        Input::Del => Ok(Output::Del {
            count: reply.number("DEL reply")?,
        }),
        Input::VDel { .. } => Ok(Output::VDel {
            result: reply.number("VDEL reply")?,
        }),
    }
}

/// Writes a key or value as a token [`parse_operation`] reads back: bare when it is plain
/// printable ASCII that cannot be mistaken for syntax, quoted otherwise.
pub fn format_bytes(bytes: &[u8]) -> String {
    let plain = !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_graphic() && *b != b'"' && *b != b'\\')
        && bytes[0] != b'#'
        && !matches!(bytes, b"nil" | b"?" | b"->" | b"OK" | b"-1");
    if plain {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut out = String::from("\"");
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Operation {
    /// The operation as one line of the text format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{} {} ", self.client, self.call)?;
        match self.ret() {
            Some(ret) => write!(f, "{ret} ")?,
            None => write!(f, "? ")?,
        }
        let key = format_bytes(&self.key);
        match &self.input {
            Input::Set { value, condition } => {
                write!(f, "SET {key} {}", format_bytes(value))?;
                match condition {
                    Condition::Always => {}
                    Condition::Nx => write!(f, " NX")?,
                    Condition::Nex => write!(f, " NEX")?,
                }
            }
            Input::Get => write!(f, "GET {key}")?,
            Input::Del => write!(f, "DEL {key}")?,
            Input::VDel { value } => write!(f, "VDEL {key} {}", format_bytes(value))?,
        }
        match self.output() {
            None => write!(f, " -> ?"),
            Some(Output::Set { applied: true }) => write!(f, " -> OK"),
            Some(Output::Set { applied: false }) => write!(f, " -> -1"),
            Some(Output::Get { value: None }) => write!(f, " -> nil"),
            Some(Output::Get { value: Some(value) }) => write!(f, " -> {}", format_bytes(value)),
            Some(Output::Del { count }) => write!(f, " -> {count}"),
            Some(Output::VDel { result }) => write!(f, " -> {result}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let text = "# comment\n\
                    c1 0 10 SET k v1 -> OK\n\
                    c2 5 12 set k v2 nx -> -1   # trailing comment\n\
                    c3 20 30 GET k -> v1\n\
                    \n\
                    c3 40 50 GET k -> nil\n\
                    c1 15 25 DEL k -> 1\n\
                    c2 30 35 VDEL k v1 -> -1\n\
                    c4 8 ? SET k v3 NEX -> ?\n\
                    c5 1 2 GET \"a key\" -> \"\"\n";
        let history = parse_history(text).expect("parses");
        assert_eq!(history.len(), 8);
        assert_eq!(
            history[1],
            Operation::returned(
                2,
                "k",
                Input::Set {
                    value: b"v2".to_vec(),
                    condition: Condition::Nx
                },
                5,
                12,
                Output::Set { applied: false }
            )
        );
        assert_eq!(history[3].output(), Some(&Output::Get { value: None }));
        assert_eq!(history[6].outcome, Outcome::Unknown);
        assert_eq!(history[7].key, b"a key");
        assert_eq!(
            history[7].output(),
            Some(&Output::Get {
                value: Some(vec![])
            })
        );
    }

    #[test]
    fn display_round_trips() {
        let text = "c1 0 10 SET k v1 -> OK\n\
                    c2 5 12 SET k v2 NX -> -1\n\
                    c3 40 50 GET k -> nil\n\
                    c3 41 52 GET k -> \"nil\"\n\
                    c3 60 70 GET \"#k\" -> \"a\\x00\\n\\\"b\"\n\
                    c1 15 25 DEL k -> 0\n\
                    c2 30 35 VDEL k \"\" -> 1\n\
                    c4 8 ? SET k v3 NEX -> ?";
        let history = parse_history(text).expect("parses");
        let written: Vec<String> = history.iter().map(|op| op.to_string()).collect();
        assert_eq!(written.join("\n"), text);
        assert_eq!(history[4].key, b"#k");
        assert_eq!(
            history[4].output(),
            Some(&Output::Get {
                value: Some(b"a\0\n\"b".to_vec())
            })
        );
    }

    #[test]
    fn reports_bad_lines() {
        for bad in [
            "c1 0 10 SET k -> OK",
            "c1 0 10 SET k v -> maybe",
            "c1 0 10 GET k",
            "x1 0 10 GET k -> nil",
            "c1 10 5 GET k -> nil",
            "c1 0 ? GET k -> nil",
            "c1 0 10 PUT k v -> OK",
            "c1 0 10 SET k v XX -> OK",
            "c1 0 10 GET \"k -> nil",
        ] {
            assert!(parse_operation(bad).is_err(), "{bad}");
        }
        let error = parse_history("c1 0 1 GET k -> nil\nnonsense").expect_err("line 2 is bad");
        assert_eq!(error.line, 2);
    }
}
