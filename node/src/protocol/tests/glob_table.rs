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
/// fnmatch's bracket rules written out separately from `glob.rs`.
fn model(pattern: &str, key: &str) -> bool {
    let characters: Vec<char> = pattern.chars().collect();
    let mut regex = String::from("(?s)^");
    let mut position = 0;
    while let Some(&current) = characters.get(position) {
        position += 1;
        match current {
            '*' => regex.push_str(".*"),
            '?' => regex.push('.'),
            '[' => match model_class(&characters[position..]) {
                Some((class, consumed)) => {
                    regex.push_str(&class);
                    position += consumed;
                }
                None => regex.push_str(&regex::escape("[")),
            },
            other => regex.push_str(&regex::escape(&other.to_string())),
        }
    }
    regex.push('$');
    regex::Regex::new(&regex)
        .expect("model regex")
        .is_match(key)
}

/// The regex of a bracket expression whose `[` was just read, and the characters it took
/// (including the `]`); `None` when no `]` closes it.
fn model_class(after_bracket: &[char]) -> Option<(String, usize)> {
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
    Some((class, close + 1))
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn agrees_with_the_regex_model(pattern in pattern_strategy(), key in key_strategy()) {
        let glob = Glob::compile(pattern.as_bytes()).expect("short patterns compile");
        prop_assert_eq!(glob.matches(key.as_bytes()).matched, model(&pattern, &key),
            "pattern {:?} key {:?}", pattern, key);
    }
}
