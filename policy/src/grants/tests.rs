//! Checks on grants built by hand (the policy's merging is tested in `policy/tests.rs` and by
//! the table and model tests under `policy/tests/`).

use super::*;

fn glob(text: &str) -> Pattern {
    Pattern::new(text, Glob::compile(text.as_bytes()).expect("compiles"))
}

fn read_write() -> u8 {
    KeyAccess::Read.bit() | KeyAccess::Write.bit()
}

#[test]
fn grants_are_send_sync_static_and_cheap_to_clone() {
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}
    assert_send_sync_static::<Grants>();
    assert_send_sync_static::<crate::Policy>();
    assert_eq!(size_of::<Grants>(), size_of::<usize>());
}

#[test]
fn only_stars_is_any_utf8() {
    assert!(matches!(glob("*"), Pattern::AnyUtf8));
    assert!(matches!(glob("***"), Pattern::AnyUtf8));
    assert!(matches!(glob("*?"), Pattern::Glob(_)));
    assert!(matches!(glob("[*]"), Pattern::Glob(_)));
    assert!(matches!(glob("ab?c*"), Pattern::Glob(glob) if &*glob.prefix == b"ab"));
    assert!(matches!(glob("é[x]"), Pattern::Glob(glob) if &*glob.prefix == "é".as_bytes()));
    assert!(matches!(glob("?"), Pattern::Glob(glob) if glob.prefix.is_empty()));
    assert!(glob("ab?c*").matches_utf8(b"abXcdef"));
    assert!(!glob("ab?c*").matches_utf8(b"aXXcdef"));
    assert!(glob("*").matches_utf8(b""));
    assert!(!glob("[*]").matches_utf8(b"x"));
    assert!(glob("[*]").matches_utf8(b"*"));
}

#[test]
fn open_grants_allow_everything() {
    let open = Grants::open();
    for access in [KeyAccess::Read, KeyAccess::Write] {
        assert!(open.allows_key(access, b"any"));
        assert!(open.allows_key(access, b"\xff"));
    }
    for action in [
        DeviceAction::Send,
        DeviceAction::Purge,
        DeviceAction::Forget,
        DeviceAction::Read,
        DeviceAction::Feedback,
    ] {
        assert!(open.allows_device(action, Some("d")));
        assert!(open.allows_device(action, None));
    }
}

#[test]
fn empty_grants_deny_everything() {
    let none = Grants::new(GrantsData::default());
    assert!(!none.allows_key(KeyAccess::Read, b"k"));
    assert!(!none.allows_device(DeviceAction::Feedback, None));
    assert!(!none.allows_device(DeviceAction::Send, Some("d")));
}

#[test]
fn exact_bits_then_patterns_granting_that_access() {
    let mut data = GrantsData {
        key_bits: read_write(),
        ..GrantsData::default()
    };
    data.keys
        .insert(Arc::from(&b"k"[..]), KeyAccess::Read.bit());
    data.key_patterns = PatternIndex::new(vec![
        (glob("w*"), KeyAccess::Write.bit()),
        (glob("*"), KeyAccess::Read.bit()),
    ]);
    let grants = Grants::new(data);
    let table: &[(KeyAccess, &[u8], bool)] = &[
        (KeyAccess::Read, b"k", true),
        (KeyAccess::Write, b"k", false),
        (KeyAccess::Write, b"wk", true),
        (KeyAccess::Read, b"wk", true),
        (KeyAccess::Read, b"anything", true),
        // Not UTF-8: no glob matches, not even `*`.
        (KeyAccess::Read, b"\xff", false),
        (KeyAccess::Write, b"w\xff", false),
    ];
    for &(access, key, expected) in table {
        assert_eq!(
            grants.allows_key(access, key),
            expected,
            "{access:?} {key:?}"
        );
    }
}

#[test]
fn devices_feedback_and_missing_device_ids() {
    let mut data = GrantsData {
        feedback: true,
        device_bits: DeviceAction::Send.bit() | DeviceAction::Read.bit(),
        ..GrantsData::default()
    };
    data.devices
        .insert(Arc::from("d1"), DeviceAction::Send.bit());
    data.device_patterns = PatternIndex::new(vec![(glob("plant-?"), DeviceAction::Read.bit())]);
    let grants = Grants::new(data);
    assert!(grants.allows_device(DeviceAction::Send, Some("d1")));
    assert!(!grants.allows_device(DeviceAction::Read, Some("d1")));
    assert!(grants.allows_device(DeviceAction::Read, Some("plant-7")));
    assert!(!grants.allows_device(DeviceAction::Read, Some("plant-77")));
    assert!(!grants.allows_device(DeviceAction::Purge, Some("d1")));
    assert!(!grants.allows_device(DeviceAction::Send, None));
    assert!(grants.allows_device(DeviceAction::Feedback, None));
    assert!(grants.allows_device(DeviceAction::Feedback, Some("elsewhere")));
}

#[test]
fn approx_bytes_counts_own_slots_and_grows_with_them() {
    let empty = Grants::new(GrantsData::default());
    assert!(empty.approx_bytes() >= size_of::<Grants>() + size_of::<GrantsData>());
    let mut data = GrantsData::default();
    for key in 0..1000u32 {
        data.keys.insert(Arc::from(&key.to_be_bytes()[..]), 1);
    }
    let thousand = Grants::new(data);
    // At least the 1,000 entries' fat pointers and bits.
    assert!(thousand.approx_bytes() >= empty.approx_bytes() + 1000 * 17);
    assert!(thousand.approx_bytes() < empty.approx_bytes() + 1000 * 64);
    assert_eq!(thousand.clone().approx_bytes(), thousand.approx_bytes());
}

#[test]
fn the_pattern_index_finds_every_glob_whose_prefix_the_text_starts_with() {
    let read = KeyAccess::Read.bit();
    let write = KeyAccess::Write.bit();
    let index = PatternIndex::new(vec![
        (glob("app-0001/*"), read),
        (glob("app-0002/*"), read | write),
        (glob("app-*"), write),
        (glob("*-x"), read),
        (glob("?"), read),
        (glob("a[b"), read),
    ]);
    assert_eq!(index.len(), 6);
    // (text, bit, granted): prefixes of several lengths, the empty prefix, a text shorter
    // than a prefix, bits of the right glob only.
    let table: &[(&[u8], u8, bool)] = &[
        (b"app-0001/k", read, true),
        (b"app-0001/k", write, true),
        (b"app-0002/k", write, true),
        (b"app-0003/k", read, false),
        (b"app-0003/k", write, true),
        (b"app-", write, true),
        (b"app", write, false),
        (b"zz-x", read, true),
        (b"app-0003-x", read, true),
        (b"z", read, true),
        (b"", read, false),
        (b"a[b", read, true),
        (b"ab", read, false),
    ];
    for &(text, bit, expected) in table {
        assert_eq!(
            index.grants(text, bit),
            expected,
            "{:?} bit {bit}",
            String::from_utf8_lossy(text)
        );
    }
    assert!(PatternIndex::new(Vec::new()).is_empty());
}
