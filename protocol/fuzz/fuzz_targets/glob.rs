//! Fuzz target for SCAN's glob patterns (`Glob::compile`, `Glob::matches`): never panics,
//! compiling looks at most twice at each pattern character, the comparisons charged for a key
//! stay within its characters × the pattern's `cost_per_character` (itself at most
//! `MAX_COST_PER_CHARACTER`), `*` matches every UTF-8 key, and a key's own text (with `*`, `?`
//! and `[` written as one-character classes) matches that key.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_protocol::glob::{Glob, MAX_COST_PER_CHARACTER, MAX_PATTERN_ELEMENTS};

fuzz_target!(|input: &[u8]| {
    // The first byte says where the pattern ends and the key begins.
    let Some((&split, rest)) = input.split_first() else {
        return;
    };
    let (pattern, key) = rest.split_at(usize::from(split).min(rest.len()));
    let mut steps = 0u64;
    let compiled = Glob::compile_counting(pattern, &mut steps);
    if let Ok(text) = std::str::from_utf8(pattern) {
        let characters = text.chars().count() as u64;
        assert!(steps <= 2 * characters, "{steps} steps for {characters}");
    }
    if let Ok(glob) = compiled {
        assert!(glob.cost_per_character() <= MAX_COST_PER_CHARACTER);
        let result = glob.matches(key);
        let characters = std::str::from_utf8(key).map_or(0, |k| k.chars().count() as u64);
        assert!(
            result.comparisons <= glob.cost_per_character() * characters,
            "{} comparisons over {} × {characters}",
            result.comparisons,
            glob.cost_per_character()
        );
    }
    let Ok(text) = std::str::from_utf8(key) else {
        return;
    };
    assert!(
        Glob::compile(b"*")
            .expect("one element")
            .matches(key)
            .matched
    );
    if text.chars().count() <= MAX_PATTERN_ELEMENTS {
        let mut own = String::new();
        for character in text.chars() {
            match character {
                '*' | '?' | '[' => {
                    own.push('[');
                    own.push(character);
                    own.push(']');
                }
                other => own.push(other),
            }
        }
        let glob = Glob::compile(own.as_bytes()).expect("within the element and range limits");
        assert!(glob.matches(key).matched, "{own:?} must match {text:?}");
    }
});
