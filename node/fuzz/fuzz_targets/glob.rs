//! Fuzz target for SCAN's glob patterns (`Glob::compile`, `Glob::matches`): never panics, the
//! work per key stays within elements × characters, `*` matches every UTF-8 key, and a key's
//! own text (with `*`, `?` and `[` written as one-character classes) matches that key.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_node_fuzz::protocol::glob::{Glob, MAX_PATTERN_ELEMENTS};

fuzz_target!(|input: &[u8]| {
    // The first byte says where the pattern ends and the key begins.
    let Some((&split, rest)) = input.split_first() else {
        return;
    };
    let (pattern, key) = rest.split_at(usize::from(split).min(rest.len()));
    if let Ok(glob) = Glob::compile(pattern) {
        let result = glob.matches(key);
        let bound = (MAX_PATTERN_ELEMENTS as u64) * (key.len() as u64 + 1);
        assert!(result.comparisons <= bound);
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
        let glob = Glob::compile(own.as_bytes()).expect("within the element limit");
        assert!(glob.matches(key).matched, "{own:?} must match {text:?}");
    }
});
