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
//! Work is bounded (issue 27), and what is charged is the work done:
//! - **Compile** is linear in the pattern: each character is looked at once, except the
//!   characters after the first unclosed `[`, which are looked at twice (see
//!   [`Glob::compile_counting`]). A pattern has at most [`MAX_PATTERN_ELEMENTS`] elements (a
//!   run of `*` counts as one), at most [`MAX_CLASS_RANGES`] members or ranges in one bracket
//!   expression and at most [`MAX_PATTERN_RANGES`] in all; more is `syntax error`.
//! - **Matching** never backtracks past a `*` (each segment between stars is placed at its
//!   leftmost possible position, which is optimal). Every check of one key character against
//!   one element is charged: 1 for a literal or `?`; for a class, 1 plus each range probed. A
//!   class's ranges are sorted and merged at compile time and found by binary search, so a
//!   class of `r` merged ranges probes at most `bit_length(r)` of them. Each element therefore
//!   costs at most its [`Glob::cost_per_character`] share, and one key of `n` characters costs
//!   at most `n × cost_per_character` comparisons (failed starting positions included); with the
//!   caps that is at most `n ×` [`MAX_COST_PER_CHARACTER`]. [`Glob::matches`] reports the
//!   comparisons it made, for the caller's per-request budget.

/// Most elements a pattern may have (a run of `*` is one element); more is `syntax error`.
pub const MAX_PATTERN_ELEMENTS: usize = 1024;

/// Most members or ranges one bracket expression may list (`[a-z0-9_]` lists three); more is
/// `syntax error`. Ample for any real character set: all of ASCII's printable classes together
/// need fewer than 20.
pub const MAX_CLASS_RANGES: usize = 256;

/// Most members or ranges all the bracket expressions of one pattern may list together; more
/// is `syntax error`. With [`MAX_PATTERN_ELEMENTS`] it bounds what one key character can cost
/// ([`MAX_COST_PER_CHARACTER`]) and what a compiled pattern holds (32 KiB of ranges).
pub const MAX_PATTERN_RANGES: usize = 4096;

/// The most comparisons one key character can cost under the caps: `Σ cost` over at most
/// [`MAX_PATTERN_ELEMENTS`] elements, where a literal or `?` costs 1 and a class of `r` ranges
/// `1 + bit_length(r)`, with at most [`MAX_PATTERN_RANGES`] ranges in all. The marginal cost of
/// a range falls as classes grow, so the sum is largest with every element a class of
/// `MAX_PATTERN_RANGES / MAX_PATTERN_ELEMENTS = 4` ranges: `1024 × (1 + 3)`.
pub const MAX_COST_PER_CHARACTER: u64 = 4096;

/// One element of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    /// Exactly this character.
    Literal(char),
    /// `?`: any one character.
    AnyOne,
    /// `[...]`: one character inside (or, when `negated`, outside) the ranges, which are
    /// inclusive, non-empty, sorted and disjoint.
    Class {
        negated: bool,
        ranges: Box<[(char, char)]>,
    },
}

impl Element {
    /// The most comparisons checking one character against this element can cost.
    fn cost(&self) -> u64 {
        match self {
            Element::Literal(_) | Element::AnyOne => 1,
            Element::Class { ranges, .. } => 1 + u64::from(bit_length(ranges.len())),
        }
    }

    /// True if `candidate` is accepted; adds the comparisons made to `comparisons`.
    fn accepts(&self, candidate: char, comparisons: &mut u64) -> bool {
        *comparisons += 1;
        match self {
            Element::Literal(literal) => *literal == candidate,
            Element::AnyOne => true,
            Element::Class { negated, ranges } => {
                class_contains(ranges, candidate, comparisons) != *negated
            }
        }
    }
}

/// Bits needed to write `count`: the most probes of a binary search over `count` ranges.
fn bit_length(count: usize) -> u32 {
    usize::BITS - count.leading_zeros()
}

/// True if `candidate` lies in one of `ranges` (sorted, disjoint): a binary search for the last
/// range starting at or before it, each probe counted.
fn class_contains(ranges: &[(char, char)], candidate: char, comparisons: &mut u64) -> bool {
    let (mut low, mut high) = (0, ranges.len());
    while low < high {
        let middle = low + (high - low) / 2;
        *comparisons += 1;
        match ranges.get(middle) {
            Some(&(start, _)) if start <= candidate => low = middle + 1,
            _ => high = middle,
        }
    }
    // `low` ranges start at or before the candidate; only the last of them can hold it.
    low.checked_sub(1)
        .and_then(|index| ranges.get(index))
        .is_some_and(|&(_, end)| candidate <= end)
}

/// Sorts `ranges`, drops reversed ones (they match nothing) and merges those that overlap or
/// touch, so that a binary search finds the only candidate.
fn normalize(mut ranges: Vec<(char, char)>) -> Box<[(char, char)]> {
    ranges.retain(|&(low, high)| low <= high);
    ranges.sort_unstable();
    let mut merged: Vec<(char, char)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match merged.last_mut() {
            Some((_, last_high)) if u32::from(low) <= u32::from(*last_high).saturating_add(1) => {
                *last_high = (*last_high).max(high);
            }
            _ => merged.push((low, high)),
        }
    }
    merged.into_boxed_slice()
}

/// Why a pattern was refused (all `syntax error` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobError {
    /// More than [`MAX_PATTERN_ELEMENTS`] elements.
    TooComplex,
    /// A bracket expression lists more than [`MAX_CLASS_RANGES`] members or ranges.
    ClassTooLarge,
    /// The bracket expressions list more than [`MAX_PATTERN_RANGES`] members or ranges in all.
    TooManyRanges,
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
    /// Σ [`Element::cost`] over every element.
    cost_per_character: u64,
}

/// Result of matching one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchResult {
    /// True if the whole key matches.
    pub matched: bool,
    /// Element comparisons and range probes made (the work done).
    pub comparisons: u64,
}

impl Glob {
    /// Compiles `pattern`. A pattern that is not UTF-8 compiles to one that matches nothing.
    pub fn compile(pattern: &[u8]) -> Result<Glob, GlobError> {
        Glob::compile_counting(pattern, &mut 0)
    }

    /// [`Glob::compile`], adding to `steps` each pattern character looked at (the compile
    /// work). `steps` ends at most `2 × (characters in the pattern)`: the main loop looks at each
    /// character outside brackets once, a closed bracket expression is read once and skipped,
    /// and only the first unclosed `[` reads to the end (every later `[` is then known to be
    /// unclosed too; see the proof below).
    pub fn compile_counting(pattern: &[u8], steps: &mut u64) -> Result<Glob, GlobError> {
        let Ok(text) = std::str::from_utf8(pattern) else {
            return Ok(Glob { shape: None });
        };
        let characters: Vec<char> = text.chars().collect();
        let mut segments = vec![Vec::new()];
        let mut elements = 0usize;
        let mut ranges_in_pattern = 0usize;
        let mut cost_per_character = 0u64;
        let mut position = 0;
        let mut after_star = false;
        // Once a `[` is found unclosed, every later `[` is unclosed too. Proof: the bracket
        // expression opened at `p` closes at the first `]` after its first member, at `p + 1`
        // (or `p + 2` after `[!`): the scan visits every character from there, a range never
        // skips a `]` (a `]` after `-` ends the class instead of the range), and only a `]` in
        // the first-member position is taken as a member. A later `[` at `q > p` has its first
        // member at `q + 1 ≥ p + 2` or later, so a `]` that would close it lies after
        // `p + 2`, past the first member of `p`'s expression, and would have closed that one.
        let mut unclosed_seen = false;
        while let Some(&current) = characters.get(position) {
            *steps += 1;
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
                '[' if !unclosed_seen => match parse_class(&characters, position, steps) {
                    Some(class) => {
                        position = class.next;
                        if class.ranges_listed > MAX_CLASS_RANGES {
                            return Err(GlobError::ClassTooLarge);
                        }
                        ranges_in_pattern += class.ranges_listed;
                        if ranges_in_pattern > MAX_PATTERN_RANGES {
                            return Err(GlobError::TooManyRanges);
                        }
                        class.element
                    }
                    None => {
                        unclosed_seen = true;
                        Element::Literal('[')
                    }
                },
                other => Element::Literal(other),
            };
            elements += 1;
            if elements > MAX_PATTERN_ELEMENTS {
                return Err(GlobError::TooComplex);
            }
            cost_per_character += element.cost();
            if let Some(segment) = segments.last_mut() {
                segment.push(element);
            }
        }
        if elements > MAX_PATTERN_ELEMENTS {
            return Err(GlobError::TooComplex);
        }
        Ok(Glob {
            shape: Some(Shape {
                segments,
                cost_per_character,
            }),
        })
    }

    /// The most comparisons one key character can cost this pattern: a key of `n` characters
    /// costs at most `n ×` this (never more than [`MAX_COST_PER_CHARACTER`]; 0 for a pattern
    /// that is not UTF-8, which compares nothing).
    pub fn cost_per_character(&self) -> u64 {
        self.shape
            .as_ref()
            .map_or(0, |shape| shape.cost_per_character)
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

/// True if `segment` matches `key` at `start` (the caller checked the length fits). Each
/// element checked is charged, the failing one included.
fn segment_at(segment: &[Element], key: &[char], start: usize, comparisons: &mut u64) -> bool {
    let Some(window) = key.get(start..start + segment.len()) else {
        return false;
    };
    segment
        .iter()
        .zip(window)
        .all(|(element, &candidate)| element.accepts(candidate, comparisons))
}

/// The leftmost position in `from..` where `segment` (never empty: it lies between two runs of
/// stars) matches and ends by `end`. Every starting position tried is charged at least its
/// first element's check.
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

/// A closed bracket expression.
struct ParsedClass {
    element: Element,
    /// Members and ranges as written (before sorting and merging), for the caps.
    ranges_listed: usize,
    /// The position after its `]`.
    next: usize,
}

/// Parses a bracket expression whose `[` is just before `start`, or `None` when it is not
/// closed. Reads each character from `start` to its `]` (or the end) once, adding them to
/// `steps`; keeps at most [`MAX_CLASS_RANGES`] + 1 ranges whatever it reads (more only refuses
/// the pattern, if the expression turns out to be closed).
fn parse_class(characters: &[char], start: usize, steps: &mut u64) -> Option<ParsedClass> {
    let mut position = start;
    let negated = characters.get(position) == Some(&'!');
    if negated {
        position += 1;
        *steps += 1;
    }
    let first_member = position;
    let mut ranges = Vec::new();
    let mut ranges_listed = 0usize;
    loop {
        let current = *characters.get(position)?;
        *steps += 1;
        if current == ']' && position > first_member {
            return Some(ParsedClass {
                element: Element::Class {
                    negated,
                    ranges: normalize(ranges),
                },
                ranges_listed,
                next: position + 1,
            });
        }
        let range_end = characters
            .get(position + 1)
            .filter(|&&dash| dash == '-')
            .and_then(|_| characters.get(position + 2))
            .filter(|&&high| high != ']');
        let range = match range_end {
            Some(&high) => {
                position += 3;
                *steps += 2;
                (current, high)
            }
            None => {
                position += 1;
                (current, current)
            }
        };
        ranges_listed += 1;
        if ranges_listed <= MAX_CLASS_RANGES {
            ranges.push(range);
        }
    }
}

#[cfg(test)]
mod tests;
