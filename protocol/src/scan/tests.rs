//! SCAN pages: the reply bytes of spec §2, the token, every page limit, and a property test
//! that paging through a changing key set returns each key that stayed exactly once.

use std::collections::BTreeMap;
use std::convert::Infallible;

use super::*;
use proptest::prelude::*;

fn stored(keys: &[(&[u8], bool)]) -> Vec<Result<StoredKey, Infallible>> {
    keys.iter()
        .map(|&(key, live)| {
            Ok(StoredKey {
                key: key.to_vec(),
                live,
                stored_bytes: 10,
            })
        })
        .collect()
}

fn glob(pattern: &[u8]) -> Glob {
    Glob::compile(pattern).expect("pattern compiles")
}

fn unwrap_page(result: Result<Page, Infallible>) -> Page {
    match result {
        Ok(page) => page,
        Err(never) => match never {},
    }
}

#[test]
fn section_2_reply_bytes() {
    let last = Page {
        keys: vec![b"key1".to_vec(), b"key2".to_vec()],
        next_token: None,
    };
    assert_eq!(last.encode(), b"*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n");
    let more = Page {
        keys: vec![b"k".to_vec()],
        next_token: Some(b"\x01k".to_vec()),
    };
    assert_eq!(more.encode(), b"*2\r\n*1\r\n$1\r\nk\r\n$2\r\n\x01k\r\n");
    let empty_last = Page {
        keys: vec![],
        next_token: None,
    };
    assert_eq!(empty_last.encode(), b"*1\r\n*0\r\n");
    let empty_more = Page {
        keys: vec![],
        next_token: Some(b"\x01\r\n".to_vec()),
    };
    assert_eq!(empty_more.encode(), b"*2\r\n*0\r\n$3\r\n\x01\r\n\r\n");
}

#[test]
fn tokens_round_trip_and_foreign_tokens_are_refused() {
    assert_eq!(resume_after(None), Ok(None));
    assert_eq!(resume_after(Some(b"\x01abc")), Ok(Some(&b"abc"[..])));
    assert_eq!(
        resume_after(Some(b"\x01\xff\r\n")),
        Ok(Some(&b"\xff\r\n"[..]))
    );
    for foreign in [&b""[..], b"\x01", b"\x02abc", b"abc", b"1;1;"] {
        assert_eq!(
            resume_after(Some(foreign)),
            Err(ProtocolError::Syntax),
            "{foreign:?}"
        );
    }
}

#[test]
fn expired_and_non_matching_keys_are_skipped_but_examined() {
    let keys = stored(&[
        (b"a1", true),
        (b"a2", false),
        (b"b1", true),
        (b"a3", true),
        (b"\xffa", true),
    ]);
    let page = unwrap_page(page(&glob(b"a*"), keys, &PageLimits::default()));
    assert_eq!(page.keys, vec![b"a1".to_vec(), b"a3".to_vec()]);
    assert_eq!(page.next_token, None);
}

fn unwrap_paged(result: Result<(Page, PageEnd), Infallible>) -> (Page, PageEnd) {
    match result {
        Ok(paged) => paged,
        Err(never) => match never {},
    }
}

#[test]
fn each_limit_ends_the_page_with_a_token_after_the_last_examined_key() {
    let keys: &[(&[u8], bool)] = &[(b"a", true), (b"b", true), (b"c", true), (b"d", true)];
    let unlimited = PageLimits::default();
    // (limits, keys returned, token after, why the page ended)
    let cases = [
        (
            PageLimits {
                max_keys: 2,
                ..unlimited
            },
            vec!["a", "b"],
            "b",
            PageEnd::Keys,
        ),
        (
            PageLimits {
                max_examined: 3,
                ..unlimited
            },
            vec!["a", "b", "c"],
            "c",
            PageEnd::Examined,
        ),
        (
            PageLimits {
                max_reply_bytes: 2,
                ..unlimited
            },
            vec!["a", "b"],
            "b",
            PageEnd::ReplyBytes,
        ),
        (
            PageLimits {
                max_examined_bytes: 25,
                ..unlimited
            },
            vec!["a", "b", "c"],
            "c",
            PageEnd::ExaminedBytes,
        ),
        // Each one-character key costs one comparison against `?`.
        (
            PageLimits {
                max_comparisons: 1,
                ..unlimited
            },
            vec!["a"],
            "a",
            PageEnd::Comparisons,
        ),
    ];
    for (limits, expected_keys, after, expected_end) in cases {
        let (page, end) = unwrap_paged(page_until(&glob(b"?"), stored(keys), &limits, || false));
        let expected: Vec<Vec<u8>> = expected_keys
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(page.keys, expected, "{expected_end:?}");
        assert_eq!(
            page.next_token,
            Some(token_after(after.as_bytes())),
            "{expected_end:?}"
        );
        assert_eq!(end, expected_end);
    }
    let (page, end) = unwrap_paged(page_until(&glob(b"?"), stored(keys), &unlimited, || false));
    assert_eq!(
        (page.keys.len(), page.next_token, end),
        (4, None, PageEnd::Complete)
    );
}

#[test]
fn the_deadline_cuts_the_page_after_the_key_it_was_asked_before() {
    let keys: &[(&[u8], bool)] = &[(b"a", true), (b"b", true), (b"c", true), (b"d", true)];
    // `should_stop` is asked before each key but the first: stopping at the second question
    // leaves two keys examined.
    let mut asked = 0;
    let (page, end) = unwrap_paged(page_until(
        &glob(b"*"),
        stored(keys),
        &PageLimits::default(),
        || {
            asked += 1;
            asked == 2
        },
    ));
    assert_eq!(page.keys, vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(page.next_token, Some(token_after(b"b")));
    assert_eq!(end, PageEnd::Deadline);
    assert_eq!(asked, 2);
    // Past the deadline from the start: still one key of progress (here a non-matching one,
    // so the page is empty but its token moves on).
    let (page, end) = unwrap_paged(page_until(
        &glob(b"b*"),
        stored(keys),
        &PageLimits::default(),
        || true,
    ));
    assert!(page.keys.is_empty());
    assert_eq!(page.next_token, Some(token_after(b"a")));
    assert_eq!(end, PageEnd::Deadline);
    // The other limits are judged first (the clock is not read when they end the page), and a
    // one-key source never asks.
    let limits = PageLimits {
        max_keys: 1,
        ..PageLimits::default()
    };
    let (_, end) = unwrap_paged(page_until(&glob(b"*"), stored(keys), &limits, || {
        panic!("not asked once max_keys ended the page")
    }));
    assert_eq!(end, PageEnd::Keys);
    let (page, end) = unwrap_paged(page_until(
        &glob(b"*"),
        stored(&[(b"z", true)]),
        &PageLimits::default(),
        || panic!("not asked before the first key"),
    ));
    assert_eq!((page.keys, end), (vec![b"z".to_vec()], PageEnd::Complete));
}

#[test]
fn page_end_labels_are_distinct() {
    let labels: std::collections::BTreeSet<&str> =
        PageEnd::ALL.iter().map(|end| end.label()).collect();
    assert_eq!(labels.len(), PageEnd::ALL.len());
}

#[test]
fn a_key_larger_than_the_reply_budget_still_makes_progress() {
    let big = vec![b'k'; 70_000];
    let keys = vec![
        Ok::<_, Infallible>(StoredKey {
            key: b"a".to_vec(),
            live: true,
            stored_bytes: 10,
        }),
        Ok(StoredKey {
            key: big.clone(),
            live: true,
            stored_bytes: 10,
        }),
    ];
    let limits = PageLimits {
        max_reply_bytes: 1000,
        ..PageLimits::default()
    };
    let first = unwrap_page(page(&glob(b"*"), keys, &limits));
    assert_eq!(first.keys, vec![b"a".to_vec()]);
    assert_eq!(first.next_token, Some(token_after(b"a")));
    // The next page starts at the big key alone.
    let rest = vec![Ok::<_, Infallible>(StoredKey {
        key: big.clone(),
        live: true,
        stored_bytes: 10,
    })];
    let second = unwrap_page(page(&glob(b"*"), rest, &limits));
    assert_eq!(second.keys, vec![big]);
    assert_eq!(second.next_token, None);
}

#[test]
fn a_page_with_only_non_matching_keys_is_empty_with_a_token() {
    let keys = stored(&[(b"x1", true), (b"x2", true), (b"x3", true)]);
    let limits = PageLimits {
        max_examined: 2,
        ..PageLimits::default()
    };
    let page = unwrap_page(page(&glob(b"a*"), keys, &limits));
    assert!(page.keys.is_empty());
    assert_eq!(page.next_token, Some(token_after(b"x2")));
    assert_eq!(page.encode(), b"*2\r\n*0\r\n$3\r\n\x01x2\r\n");
}

#[test]
fn source_errors_are_passed_on() {
    let keys = vec![
        Ok(StoredKey {
            key: b"a".to_vec(),
            live: true,
            stored_bytes: 10,
        }),
        Err("disk"),
    ];
    assert_eq!(page(&glob(b"*"), keys, &PageLimits::default()), Err("disk"));
}

/// One step between pages: insert or delete a key of a small space.
#[derive(Debug, Clone)]
enum Change {
    Insert(u8),
    Delete(u8),
}

fn change_strategy() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0u8..40).prop_map(Change::Insert),
        (0u8..40).prop_map(Change::Delete)
    ]
}

fn key_of(n: u8) -> Vec<u8> {
    format!("k{n:02}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn keys_present_throughout_come_exactly_once_in_order(
        initial in proptest::collection::btree_set(0u8..40, 0..40),
        changes in proptest::collection::vec(proptest::collection::vec(change_strategy(), 0..4), 0..30),
        max_keys in 1usize..5,
        max_examined in 1usize..7,
        retry_every in 1usize..4,
        stop_at_question in 0usize..6,
    ) {
        let mut store: BTreeMap<Vec<u8>, ()> = initial.iter().map(|&n| (key_of(n), ())).collect();
        let mut ever_absent: std::collections::BTreeSet<Vec<u8>> =
            (0u8..40).map(key_of).filter(|k| !store.contains_key(k)).collect();
        let limits = PageLimits { max_keys, max_examined, ..PageLimits::default() };
        let pattern = glob(b"k*");
        let mut token: Option<Vec<u8>> = None;
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut pages = 0usize;
        loop {
            let after = resume_after(token.as_deref()).expect("our own token");
            let source: Vec<Result<StoredKey, Infallible>> = store
                .keys()
                .filter(|k| after.is_none_or(|a| k.as_slice() > a))
                .map(|k| Ok(StoredKey { key: k.clone(), live: true, stored_bytes: 10 }))
                .collect();
            // A deadline that passes at the `stop_at_question`-th question (never when 0).
            let run = |source: Vec<Result<StoredKey, Infallible>>| {
                let mut asked = 0;
                unwrap_paged(page_until(&pattern, source, &limits, || {
                    asked += 1;
                    asked == stop_at_question
                }))
                .0
            };
            let result = run(source.clone());
            pages += 1;
            if pages.is_multiple_of(retry_every) {
                // A client retry with the same token gets the same page when nothing changed.
                prop_assert_eq!(&run(source), &result);
            }
            seen.extend(result.keys.iter().cloned());
            if let Some(step) = changes.get(pages - 1) {
                for change in step {
                    match change {
                        Change::Insert(n) => { store.insert(key_of(*n), ()); }
                        Change::Delete(n) => {
                            store.remove(&key_of(*n));
                            ever_absent.insert(key_of(*n));
                        }
                    }
                }
            }
            match result.next_token {
                None => break,
                Some(next) => token = Some(next),
            }
            prop_assert!(pages < 1000, "the scan must end");
        }
        // Ascending, no key twice.
        prop_assert!(seen.windows(2).all(|w| w[0] < w[1]), "{:?}", seen);
        // Every key present from start to end was seen.
        for key in (0u8..40).map(key_of).filter(|k| !ever_absent.contains(k)) {
            prop_assert!(seen.contains(&key), "missed {:?}", String::from_utf8_lossy(&key));
        }
    }
}
