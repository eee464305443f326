//! Glob patterns of `SCAN` (spec §2, issue 12): matched over the whole key, as text.
//!
//! Syntax (POSIX `fnmatch` without escapes): `*` matches any run of characters (also none),
//! `?` exactly one character, `[abc]` one of the listed characters, `[a-z]` one in the range,
//! `[!...]` one character not listed. Inside brackets every character is literal, so `[*]`
//! matches a `*`; a `]` right after `[` or `[!` is a member, a `-` first or last is literal,
//! and a `[` with no closing `]` is a literal `[`. A range whose ends are reversed (`[z-a]`)
//! matches nothing. Characters are Unicode scalar values: a key or pattern that is not UTF-8
//! never matches.
//!
//! Work is bounded: a run of `*` counts as one element, a pattern has at most
//! [`MAX_PATTERN_ELEMENTS`] elements, and matching never backtracks past a `*` (each segment
//! between stars is placed at its leftmost possible position, which is optimal), so one key
//! costs at most (pattern elements × key characters) comparisons. [`Glob::matches`] reports
//! the comparisons it made, for the caller's per-request budget.

/// Most elements a pattern may have (a run of `*` is one element); more is `syntax error`.
pub const MAX_PATTERN_ELEMENTS: usize = 1024;

/// One element of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    /// Exactly this character.
    Literal(char),
    /// `?`: any one character.
    AnyOne,
    /// `[...]`: one character inside (or, when `negated`, outside) the inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Element {
    fn accepts(&self, candidate: char) -> bool {
        match self {
            Element::Literal(literal) => *literal == candidate,
            Element::AnyOne => true,
            Element::Class { negated, ranges } => {
                let inside = ranges
                    .iter()
                    .any(|&(low, high)| low <= candidate && candidate <= high);
                inside != *negated
            }
        }
    }
}

/// Why a pattern was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobError {
    /// More than [`MAX_PATTERN_ELEMENTS`] elements.
    TooComplex,
}

/// A compiled pattern: the segments between `*`s, and whether the pattern starts or ends with
/// one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    /// `None`: the pattern is not UTF-8 and matches nothing.
    shape: Option<Shape>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    /// The elements between stars; `segments.len()` is the number of stars plus one.
    segments: Vec<Vec<Element>>,
}

/// Result of matching one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchResult {
    /// True if the whole key matches.
    pub matched: bool,
    /// Element comparisons made (the work done).
    pub comparisons: u64,
}

impl Glob {
    /// Compiles `pattern`. A pattern that is not UTF-8 compiles to one that matches nothing.
    pub fn compile(pattern: &[u8]) -> Result<Glob, GlobError> {
        let Ok(text) = std::str::from_utf8(pattern) else {
            return Ok(Glob { shape: None });
        };
        let characters: Vec<char> = text.chars().collect();
        let mut segments = vec![Vec::new()];
        let mut elements = 0usize;
        let mut position = 0;
        let mut after_star = false;
        while let Some(&current) = characters.get(position) {
            position += 1;
            if current == '*' {
                if !after_star {
                    segments.push(Vec::new());
                    elements += 1;
                }
                after_star = true;
                continue;
            }
            after_star = false;
            let element = match current {
                '?' => Element::AnyOne,
                '[' => match parse_class(&characters, position) {
                    Some((class, next)) => {
                        position = next;
                        class
                    }
                    None => Element::Literal('['),
                },
                other => Element::Literal(other),
            };
            elements += 1;
            if elements > MAX_PATTERN_ELEMENTS {
                return Err(GlobError::TooComplex);
            }
            if let Some(segment) = segments.last_mut() {
                segment.push(element);
            }
        }
        if elements > MAX_PATTERN_ELEMENTS {
            return Err(GlobError::TooComplex);
        }
        Ok(Glob {
            shape: Some(Shape { segments }),
        })
    }

    /// Whether the whole of `key` matches; keys that are not UTF-8 never match.
    pub fn matches(&self, key: &[u8]) -> MatchResult {
        let mut comparisons = 0u64;
        let matched = match (&self.shape, std::str::from_utf8(key)) {
            (Some(shape), Ok(text)) => {
                let characters: Vec<char> = text.chars().collect();
                shape.matches(&characters, &mut comparisons)
            }
            _ => false,
        };
        MatchResult {
            matched,
            comparisons,
        }
    }
}

impl Shape {
    fn matches(&self, key: &[char], comparisons: &mut u64) -> bool {
        let Some((first, rest)) = self.segments.split_first() else {
            return key.is_empty();
        };
        let Some((last, middle)) = rest.split_last() else {
            // No star: the one segment must cover the whole key.
            return first.len() == key.len() && segment_at(first, key, 0, comparisons);
        };
        // Anchored at both ends; the middle segments, leftmost first, in what lies between.
        if first.len() + last.len() > key.len() {
            return false;
        }
        let tail_start = key.len() - last.len();
        if !segment_at(first, key, 0, comparisons)
            || !segment_at(last, key, tail_start, comparisons)
        {
            return false;
        }
        let mut cursor = first.len();
        for segment in middle {
            match find_segment(segment, key, cursor, tail_start, comparisons) {
                Some(found) => cursor = found + segment.len(),
                None => return false,
            }
        }
        true
    }
}

/// True if `segment` matches `key` at `start` (the caller checked the length fits).
fn segment_at(segment: &[Element], key: &[char], start: usize, comparisons: &mut u64) -> bool {
    let Some(window) = key.get(start..start + segment.len()) else {
        return false;
    };
    for (element, &candidate) in segment.iter().zip(window) {
        *comparisons += 1;
        if !element.accepts(candidate) {
            return false;
        }
    }
    true
}

/// The leftmost position in `from..` where `segment` matches and ends by `end`.
fn find_segment(
    segment: &[Element],
    key: &[char],
    from: usize,
    end: usize,
    comparisons: &mut u64,
) -> Option<usize> {
    let last_start = end.checked_sub(segment.len())?;
    (from..=last_start).find(|&start| segment_at(segment, key, start, comparisons))
}

/// Parses a bracket expression whose `[` is just before `start`: the class and the position
/// after its `]`, or `None` when it is not closed.
fn parse_class(characters: &[char], start: usize) -> Option<(Element, usize)> {
    let mut position = start;
    let negated = characters.get(position) == Some(&'!');
    if negated {
        position += 1;
    }
    let first_member = position;
    let mut ranges = Vec::new();
    loop {
        let current = *characters.get(position)?;
        if current == ']' && position > first_member {
            return Some((Element::Class { negated, ranges }, position + 1));
        }
        let range_end = characters
            .get(position + 1)
            .filter(|&&dash| dash == '-')
            .and_then(|_| characters.get(position + 2))
            .filter(|&&high| high != ']');
        match range_end {
            Some(&high) => {
                ranges.push((current, high));
                position += 3;
            }
            None => {
                ranges.push((current, current));
                position += 1;
            }
        }
    }
}

#[cfg(test)]
#[path = "tests/glob_table.rs"]
mod tests;
