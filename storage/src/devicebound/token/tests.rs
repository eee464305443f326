//! Unit tests of lock tokens: derivation, parsing and the places they name.

use super::*;

#[test]
fn tokens_are_49_hex_bytes_naming_their_place() {
    let secret = [0xab; SECRET_BYTES];
    let token = message_token(0xabc, &secret);
    assert_eq!(token, "m0000000000000abcabababababababababababababababab");
    assert_eq!(token.len(), TOKEN_BYTES);
    assert_eq!(message_token_seq(&token), Some(0xabc));
    assert_eq!(
        batch_token(u64::MAX, &[0; SECRET_BYTES]),
        "fffffffffffffffff00000000000000000000000000000000"
    );
    for not_a_message_token in [
        "",
        "m",
        "f00000000000000070000000000000000000000000000000a",
        "m0000000000000007000000000000000000000000000000a",
        "m0000000000000007000000000000000000000000000000a00",
        "m000000000000000g0000000000000000000000000000000a",
        "M0000000000000007000000000000000000000000000000a0",
        // The format of data format 6 (place and count, no secret).
        "m0000000000000abc000000000000001f",
    ] {
        assert_eq!(
            message_token_seq(not_a_message_token),
            None,
            "{not_a_message_token:?}"
        );
    }
}

#[test]
fn secrets_are_a_pinned_function_of_seed_and_stream() {
    // Pins ChaCha12 with this seed and stream: a change in the generator's output would
    // make replicas of two builds issue different tokens for the same entry.
    let seed = TokenSeed(std::array::from_fn(|i| u8::try_from(i).unwrap_or(0)));
    let mut secrets = TokenSecrets::new(Some(&seed));
    let first = secrets.next(7);
    let second = secrets.next(8); // the stream is chosen once per entry
    let mut again = TokenSecrets::new(Some(&seed));
    assert_eq!(again.next(7), first, "deterministic");
    assert_eq!(again.next(1_000), second, "in apply order");
    assert_ne!(first, second);
    let mut hex = String::new();
    push_hex(&mut hex, &first);
    assert_eq!(hex, PINNED_FIRST_SECRET);

    let mut other_stream = TokenSecrets::new(Some(&seed));
    assert_ne!(other_stream.next(8), first, "another count, another stream");
    let mut other_seed = TokenSecrets::new(Some(&TokenSeed([1; 32])));
    assert_ne!(other_seed.next(7), first, "another seed, another secret");
    let mut unseeded = TokenSecrets::new(None);
    let mut unseeded_later = TokenSecrets::new(None);
    assert_ne!(unseeded.next(1), unseeded_later.next(2));
}

/// The first 16 bytes of ChaCha12 (key: the bytes 0, 1, ..., 31; block counter 0; stream
/// 7), computed with an implementation of the cipher independent of `rand_chacha`, itself
/// checked against the ChaCha20 block test vector of RFC 8439 §2.3.2.
const PINNED_FIRST_SECRET: &str = "3b98a191532438b177144dfdbd4ce68e";

#[test]
fn only_the_whole_token_matches() {
    let token = message_token(5, &[7; SECRET_BYTES]);
    assert!(tokens_match(&token, &token.clone()));
    let mut wrong_secret = token.clone();
    wrong_secret.pop();
    wrong_secret.push('8');
    assert!(!tokens_match(&token, &wrong_secret));
    assert!(!tokens_match(&token, &token[..TOKEN_BYTES - 1]));
    assert!(!tokens_match(&token, ""));
    assert!(!tokens_match(&token, &format!("{token}0")));
}

#[test]
fn the_seed_never_shows_in_debug_output() {
    assert_eq!(format!("{:?}", TokenSeed([0x42; 32])), "TokenSeed(..)");
}
