//! SCAN's glob patterns: the syntax table of issue 12 and `glob.rs`'s module doc, hostile
//! patterns, the work bound, and a property test against an independent model (the `regex`
//! crate, fed a translation of the pattern).

use super::*;
use proptest::prelude::*;

/// (pattern, key, matches)
const SYNTAX_TABLE: &[(&[u8], &[u8], bool)] = &[
    // `*`: any run, also empty; over the whole key.
    (b"*", b"anything", true),
    (b"key*", b"key", true),
    (b"key*", b"key1", true),
    (b"key*", b"akey1", false),
    (b"*key", b"my-key", true),
    (b"*key", b"my-key!", false),
    (b"a*b*c", b"abc", true),
    (b"a*b*c", b"axxbyyc", true),
    (b"a*b*c", b"axxbyy", false),
    (b"a*b*c", b"acb", false),
    (b"a*a", b"a", false),
    (b"a*a", b"aa", true),
    (b"*ab*ab*", b"xabyab", true),
    (b"*ab*ab*", b"xaby", false),
    // `?`: exactly one character (a character, not a byte).
    (b"k?y", b"key", true),
    (b"k?y", b"ky", false),
    (b"k?y", b"keey", false),
    ("k?y".as_bytes(), "kéy".as_bytes(), true),
    ("??".as_bytes(), "é".as_bytes(), false),
    // Classes.
    (b"[abc]", b"b", true),
    (b"[abc]", b"d", false),
    (b"[a-z]1", b"q1", true),
    (b"[a-z]1", b"Q1", false),
    (b"[!a-z]1", b"Q1", true),
    (b"[!a-z]1", b"q1", false),
    (b"[!abc]", b"b", false),
    (b"[*]", b"*", true),
    (b"[*]", b"x", false),
    (b"[?]", b"?", true),
    (b"[?]", b"x", false),
    (b"[[]", b"[", true),
    (b"[]]", b"]", true),
    (b"[!]]", b"]", false),
    (b"[!]]", b"x", true),
    (b"[a-]", b"-", true),
    (b"[-a]", b"-", true),
    (b"[z-a]", b"m", false),
    ("[α-ω]".as_bytes(), "λ".as_bytes(), true),
    // Unclosed brackets are literal.
    (b"[", b"[", true),
    (b"[", b"a", false),
    (b"[ab", b"[ab", true),
    (b"[!]", b"[!]", true),
    (b"[!]", b"x", false),
    (b"[!", b"[!", true),
    // No escapes: a backslash is a literal.
    (b"a\\*", b"a\\xyz", true),
    (b"a\\*", b"a*", false),
    // Binary-safe: CR, LF and NUL are ordinary characters.
    (b"a\r\n*", b"a\r\nb", true),
    (b"?", b"\0", true),
    // Not UTF-8: never matches, whichever side.
    (b"*", b"\xff\xfe", false),
    (b"\xff*", b"\xffa", false),
    (b"\xff", b"\xff", false),
    // The empty pattern matches only the empty key (and stored keys are never empty).
    (b"", b"", true),
    (b"", b"a", false),
];

#[test]
fn issue_12_syntax_table() {
    for &(pattern, key, expected) in SYNTAX_TABLE {
        let glob = Glob::compile(pattern).expect("compiles");
        assert_eq!(
            glob.matches(key).matched,
            expected,
            "pattern {:?} key {:?}",
            String::from_utf8_lossy(pattern),
            String::from_utf8_lossy(key)
        );
    }
}

#[test]
fn ten_thousand_stars_are_one_element_and_match_everything_cheaply() {
    let pattern = vec![b'*'; 10_000];
    let glob = Glob::compile(&pattern).expect("a run of stars is one element");
    let key = vec![b'k'; 65_536];
    let result = glob.matches(&key);
    assert!(result.matched);
    assert_eq!(result.comparisons, 0);
    assert!(!glob.matches(b"\xff").matched);
}

#[test]
fn element_limit_counts_a_run_of_stars_once() {
    let at_limit: Vec<u8> = b"a*".repeat(MAX_PATTERN_ELEMENTS / 2);
    assert!(Glob::compile(&at_limit).is_ok());
    let over_limit: Vec<u8> = b"a*"
        .repeat(MAX_PATTERN_ELEMENTS / 2)
        .into_iter()
        .chain(*b"a")
        .collect();
    assert_eq!(Glob::compile(&over_limit), Err(GlobError::TooComplex));
    let plain_over = vec![b'?'; MAX_PATTERN_ELEMENTS + 1];
    assert_eq!(Glob::compile(&plain_over), Err(GlobError::TooComplex));
    let many_stars = b"a"
        .iter()
        .chain([b'*'; 5000].iter())
        .copied()
        .collect::<Vec<_>>();
    assert!(Glob::compile(&many_stars).is_ok());
}

#[test]
fn work_per_key_is_bounded_by_elements_times_characters() {
    // The classic quadratic case: `*aaa…ab*` against `aaa…a`.
    let segment_len = MAX_PATTERN_ELEMENTS - 3;
    let mut pattern = b"*".to_vec();
    pattern.extend(std::iter::repeat_n(b'a', segment_len));
    pattern.extend_from_slice(b"b*");
    let glob = Glob::compile(&pattern).expect("compiles");
    let key = vec![b'a'; 65_536];
    let result = glob.matches(&key);
    assert!(!result.matched);
    let bound = (MAX_PATTERN_ELEMENTS as u64) * (key.len() as u64);
    assert!(
        result.comparisons <= bound,
        "{} comparisons over the bound {bound}",
        result.comparisons
    );
    // And the pathological cost is real, not skipped: the caller's budget needs the count.
    assert!(result.comparisons > key.len() as u64);
}

/// The independent model: the pattern translated to an anchored `regex` over text, with
/// fnmatch's bracket rules written out separately from `glob.rs`, and the documented cost of
/// one key character (a literal or `?` 1, a class of `r` listed ranges at most
/// `1 + ⌈log2(r + 1)⌉`, a star 0).
struct Model {
    regex: regex::Regex,
    cost_per_character: u64,
}

fn model(pattern: &str) -> Model {
    let characters: Vec<char> = pattern.chars().collect();
    let mut regex = String::from("(?s)^");
    let mut cost_per_character = 0u64;
    let mut position = 0;
    while let Some(&current) = characters.get(position) {
        position += 1;
        match current {
            '*' => regex.push_str(".*"),
            '?' => {
                regex.push('.');
                cost_per_character += 1;
            }
            '[' => match model_class(&characters[position..]) {
                Some((class, consumed, listed)) => {
                    regex.push_str(&class);
                    position += consumed;
                    // Binary search over at most `listed` ranges, plus the element's own check.
                    cost_per_character += 1 + (listed as f64 + 1.0).log2().ceil() as u64;
                }
                None => {
                    regex.push_str(&regex::escape("["));
                    cost_per_character += 1;
                }
            },
            other => {
                regex.push_str(&regex::escape(&other.to_string()));
                cost_per_character += 1;
            }
        }
    }
    regex.push('$');
    Model {
        regex: regex::Regex::new(&regex).expect("model regex"),
        cost_per_character,
    }
}

/// The regex of a bracket expression whose `[` was just read, the characters it took
/// (including the `]`) and the members or ranges it lists; `None` when no `]` closes it.
fn model_class(after_bracket: &[char]) -> Option<(String, usize, usize)> {
    let negated = after_bracket.first() == Some(&'!');
    let members_start = usize::from(negated);
    // The first member may be `]`; the class ends at the next `]` after it.
    let close = members_start
        + 1
        + after_bracket
            .get(members_start + 1..)?
            .iter()
            .position(|&c| c == ']')?;
    let members = &after_bracket[members_start..close];
    let mut ranges = Vec::new();
    let mut index = 0;
    while index < members.len() {
        if members.get(index + 1) == Some(&'-') && index + 2 < members.len() {
            ranges.push((members[index], members[index + 2]));
            index += 3;
        } else {
            ranges.push((members[index], members[index]));
            index += 1;
        }
    }
    let body: String = ranges
        .iter()
        .filter(|(low, high)| low <= high)
        .map(|(low, high)| {
            format!(
                "{}-{}",
                regex::escape(&low.to_string()),
                regex::escape(&high.to_string())
            )
        })
        .collect();
    let class = match (body.is_empty(), negated) {
        (true, false) => "[^\\s\\S]".to_owned(),
        (true, true) => ".".to_owned(),
        (false, false) => format!("[{body}]"),
        (false, true) => format!("[^{body}]"),
    };
    Some((class, close + 1, ranges.len()))
}

/// Pattern pieces over a small alphabet so that matches are common.
fn pattern_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[abc]".prop_map(String::from),
        1 => Just("*".to_owned()),
        1 => Just("?".to_owned()),
        1 => "\\[[!]?[a-c\\-\\]][a-c\\-]{0,3}\\]".prop_map(String::from),
        1 => Just("[".to_owned()),
        1 => Just("é".to_owned()),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
}

fn key_strategy() -> impl Strategy<Value = String> {
    "[abc\\-\\]\\[!é*]{0,10}".prop_map(String::from)
}

/// Patterns with wide classes (up to 60 members and ranges over `a..z`, overlapping, touching
/// and reversed ones among them) between stars, `?` and literals: the sorted, merged,
/// binary-searched classes against the regex model, and their cost.
fn wide_pattern_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "\\[!?[a-z][a-z\\-]{0,59}\\]".prop_map(String::from),
        1 => Just("*".to_owned()),
        1 => Just("?".to_owned()),
        1 => "[a-z]".prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

fn wide_key_strategy() -> impl Strategy<Value = String> {
    "[a-z\\-]{0,16}".prop_map(String::from)
}

/// The model's verdicts on one (pattern, key): same match, and the comparisons charged
/// within both the documented bound (model) and the pattern's own `cost_per_character`.
fn check_against_model(pattern: &str, key: &str) -> Result<(), TestCaseError> {
    let glob = Glob::compile(pattern.as_bytes()).expect("short patterns compile");
    let model = model(pattern);
    let result = glob.matches(key.as_bytes());
    prop_assert_eq!(
        result.matched,
        model.regex.is_match(key),
        "pattern {:?} key {:?}",
        pattern,
        key
    );
    let characters = key.chars().count() as u64;
    prop_assert!(glob.cost_per_character() <= model.cost_per_character);
    prop_assert!(
        result.comparisons <= model.cost_per_character * characters,
        "pattern {:?} key {:?}: {} comparisons over {} × {}",
        pattern,
        key,
        result.comparisons,
        model.cost_per_character,
        characters
    );
    prop_assert!(result.comparisons <= glob.cost_per_character() * characters);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn agrees_with_the_regex_model_within_the_cost_bound(
        pattern in pattern_strategy(),
        key in key_strategy(),
    ) {
        check_against_model(&pattern, &key)?;
    }

    #[test]
    fn wide_classes_agree_with_the_regex_model_within_the_cost_bound(
        pattern in wide_pattern_strategy(),
        key in wide_key_strategy(),
    ) {
        check_against_model(&pattern, &key)?;
    }
}

/// `count` members `a`, `b`, … (distinct characters from `a` on) in one bracket expression.
fn class_of(count: usize) -> String {
    let members: String = (0..count)
        .map(|i| char::from_u32(0x61 + i as u32).expect("a character"))
        .collect();
    format!("[{members}]")
}

#[test]
fn the_range_caps_accept_their_limit_and_refuse_one_more() {
    // Per class: members and ranges as written count, merged or not.
    assert!(Glob::compile(class_of(MAX_CLASS_RANGES).as_bytes()).is_ok());
    assert_eq!(
        Glob::compile(class_of(MAX_CLASS_RANGES + 1).as_bytes()),
        Err(GlobError::ClassTooLarge)
    );
    let ranges_at_cap = format!("[{}]", "a-z".repeat(MAX_CLASS_RANGES));
    assert!(Glob::compile(ranges_at_cap.as_bytes()).is_ok());
    let ranges_over = format!("[!{}]", "a-z".repeat(MAX_CLASS_RANGES + 1));
    assert_eq!(
        Glob::compile(ranges_over.as_bytes()),
        Err(GlobError::ClassTooLarge)
    );
    // Per pattern.
    let full_classes = MAX_PATTERN_RANGES / MAX_CLASS_RANGES;
    let at_cap = class_of(MAX_CLASS_RANGES).repeat(full_classes);
    assert!(Glob::compile(at_cap.as_bytes()).is_ok());
    let over = format!("{at_cap}[a]");
    assert_eq!(
        Glob::compile(over.as_bytes()),
        Err(GlobError::TooManyRanges)
    );
    // An unclosed `[` is a literal: what follows it is not a class and counts no range.
    let unclosed = format!("[{}", "a".repeat(MAX_CLASS_RANGES + 1));
    let glob = Glob::compile(unclosed.as_bytes()).expect("literals");
    assert!(glob.matches(unclosed.as_bytes()).matched);
    // Every cap is a `syntax error` on the wire.
    for refused in [class_of(MAX_CLASS_RANGES + 1), over] {
        let limits = crate::ProtocolLimits::default();
        let payload = format!("*2\r\n$4\r\nSCAN\r\n${}\r\n{refused}\r\n", refused.len());
        let err = crate::parse_command(payload.as_bytes(), &limits).expect_err("over a cap");
        assert_eq!(err, crate::ProtocolError::Syntax);
        assert_eq!(err.to_string(), "syntax error");
    }
}

#[test]
fn the_worst_pattern_under_the_caps_costs_what_the_documented_bound_says() {
    // Every element a class of four ranges (a, c, e, g: none merge): the largest cost per
    // character the caps allow.
    assert_eq!(MAX_PATTERN_RANGES / MAX_PATTERN_ELEMENTS, 4);
    let pattern = "[aceg]".repeat(MAX_PATTERN_ELEMENTS);
    let glob = Glob::compile(pattern.as_bytes()).expect("at the caps");
    assert_eq!(glob.cost_per_character(), MAX_COST_PER_CHARACTER);
    assert_eq!(model(&pattern).cost_per_character, MAX_COST_PER_CHARACTER);
    // `b` lies between the first two ranges: three probes find `a`, whose end is before it.
    let result = glob.matches(&vec![b'b'; MAX_PATTERN_ELEMENTS]);
    assert!(!result.matched);
    assert_eq!(
        result.comparisons,
        1 + 3,
        "the first class fails after all its probes"
    );
    // `a` is in the first range: three probes to find it, in each of the 1024 classes.
    let result = glob.matches(&vec![b'a'; MAX_PATTERN_ELEMENTS]);
    assert!(result.matched);
    assert_eq!(result.comparisons, (1 + 3) * MAX_PATTERN_ELEMENTS as u64);
}

#[test]
fn a_class_of_many_ranges_costs_its_probes_not_one() {
    // 256 single characters, merged into none: every probe of the binary search is charged.
    let members: String = (0..MAX_CLASS_RANGES as u32)
        .map(|i| char::from_u32(0x100 + 2 * i).expect("a character"))
        .collect();
    let pattern = format!("*[{members}]*");
    let glob = Glob::compile(pattern.as_bytes()).expect("at the class cap");
    assert_eq!(
        glob.cost_per_character(),
        1 + 9,
        "bit_length(256) = 9 probes"
    );
    let key = "a".repeat(1000);
    let result = glob.matches(key.as_bytes());
    assert!(!result.matched);
    // Each of the 1000 starting positions: the element check and its probes (`a` is below
    // every range, so the search goes left all the way: 9 probes).
    assert_eq!(result.comparisons, 1000 * (1 + 9));
    // Touching and overlapping ranges merge: `[a-cd-fb-e]` is one range, one probe.
    let merged = Glob::compile(b"[a-cd-fb-e]").expect("compiles");
    assert_eq!(merged.cost_per_character(), 1 + 1);
    assert_eq!(merged.matches(b"e").comparisons, 2);
    assert!(merged.matches(b"f").matched);
    assert!(!merged.matches(b"g").matched);
}

#[test]
fn compile_work_is_linear_in_the_pattern() {
    // The pattern-size limit is 64 KiB; each of these once cost up to elements × length.
    let n = crate::ProtocolLimits::DEFAULT_MAX_KEY_BYTES;
    let hostile: [(&str, Vec<u8>); 7] = [
        ("all [", vec![b'['; n]),
        ("[! repeated", b"[!".repeat(n / 2)),
        ("*[ repeated", b"*[".repeat(n / 2)),
        ("[ then letters", [&b"["[..], &vec![b'a'; n - 1]].concat()),
        ("[a-] repeated", b"[a-".repeat(n / 3)),
        ("closed classes", b"[a-z]".repeat(n / 5)),
        ("[]] and [!]", b"[]][!]".repeat(n / 6)),
    ];
    for (name, pattern) in hostile {
        let characters = pattern.len() as u64;
        let mut steps = 0u64;
        let _ = Glob::compile_counting(&pattern, &mut steps);
        assert!(
            steps <= 2 * characters,
            "{name}: {steps} steps for {characters} characters"
        );
    }
    // A lone unclosed `[` reads the rest once: the count is real, not skipped.
    let mut steps = 0u64;
    let pattern = [&b"["[..], &vec![b'a'; 1000]].concat();
    Glob::compile_counting(&pattern, &mut steps).expect("compiles");
    assert_eq!(steps, 1 + 1000 + 1000);
}
