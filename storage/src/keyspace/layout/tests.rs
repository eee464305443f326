//! Unit tests of the keyspace's key layout: composite keys never mix, expiry keys sort by time.

use super::*;

#[test]
fn observer_prefixes_never_mix_keys() {
    // key "a" with client "bc" must not share a prefix scan with key "ab", client "c"
    let p = observers_prefix(b"a");
    assert!(observer_key(b"a", "bc").starts_with(&p));
    assert!(!observer_key(b"ab", "c").starts_with(&p));
}

#[test]
fn expiry_keys_sort_by_time_then_key() {
    assert!(expiry_key(1, b"z") < expiry_key(2, b"a"));
    assert!(expiry_key(5, b"a") < expiry_due_bound(5));
    assert!(expiry_key(6, b"") >= expiry_due_bound(5));
    assert_eq!(
        split_expiry_key(&expiry_key(42, b"k\r\n")),
        Some((42, &b"k\r\n"[..]))
    );
}
