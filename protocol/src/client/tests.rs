//! `statestore kv`'s wire codec against the byte forms of the protocol (spec §2, §3, §7).

use super::*;

#[test]
fn requests_are_arrays_of_bulk_strings() {
    let table: &[(&[&[u8]], &[u8])] = &[
        (&[b"GET", b"k"], b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
        (
            &[b"SET", b"key", b"", b"NX"],
            b"*4\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n$2\r\nNX\r\n",
        ),
        (
            &[b"VDEL", b"k", b"a\r\nb"],
            b"*3\r\n$4\r\nVDEL\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n",
        ),
    ];
    for (parts, bytes) in table {
        assert_eq!(request(parts), *bytes, "{parts:?}");
    }
}

#[test]
fn every_reply_form_of_the_spec_and_nothing_else() {
    let table: &[(&[u8], Option<Reply>)] = &[
        (b"+OK\r\n", Some(Reply::Ok)),
        (b"$3\r\nabc\r\n", Some(Reply::Value(b"abc".to_vec()))),
        (b"$0\r\n\r\n", Some(Reply::Value(Vec::new()))),
        (b"$4\r\na\r\nb\r\n", Some(Reply::Value(b"a\r\nb".to_vec()))),
        (b"$-1\r\n", Some(Reply::Nil)),
        (b"_\r\n", Some(Reply::Nil)),
        (b":1\r\n", Some(Reply::Integer(1))),
        (b":0\r\n", Some(Reply::Integer(0))),
        (b":-1\r\n", Some(Reply::Integer(-1))),
        (
            b"-ERR syntax error\r\n",
            Some(Reply::Error("ERR syntax error".into())),
        ),
        (b"+OK", None),
        (b"+OK\r\nextra", None),
        (b"+PONG\r\n", None),
        (b"$5\r\nabc\r\n", None),
        (b"$3\r\nabcd\r\n", None),
        (b":x\r\n", None),
        (b"", None),
        (b"*1\r\n$1\r\na\r\n", None),
    ];
    for (payload, expected) in table {
        assert_eq!(
            parse_reply(payload),
            *expected,
            "{:?}",
            String::from_utf8_lossy(payload)
        );
    }
}

#[test]
fn notifications_and_their_keys() {
    assert_eq!(
        parse_notification(b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$2\r\nv1\r\n"),
        Some(Notification::Set(b"v1".to_vec()))
    );
    assert_eq!(
        parse_notification(b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"),
        Some(Notification::Delete)
    );
    assert_eq!(parse_notification(b"*1\r\n$6\r\nNOTIFY\r\n"), None);
    assert_eq!(parse_notification(b"+OK\r\n"), None);
    assert_eq!(
        notified_key(
            "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6B7663/command/notify/6B6579AB"
        ),
        Some(b"key\xab".to_vec())
    );
    assert_eq!(notified_key("clients/x/command/notify/ZZ"), None);
    assert_eq!(notified_key("clients/x/other"), None);
}

#[test]
fn scan_pages_as_the_store_encodes_them_and_nothing_else() {
    use crate::scan::Page;
    let keys = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
    // The store's own encoder is the reference for the byte form.
    for (page_keys, token) in [
        (keys(&[]), None),
        (keys(&[b"a", b"", b"k\r\ney"]), None),
        (keys(&[b"a"]), Some(b"\x01a".to_vec())),
        (keys(&[]), Some(b"\x01zz".to_vec())),
    ] {
        let encoded = Page {
            keys: page_keys.clone(),
            next_token: token.clone(),
        }
        .encode();
        assert_eq!(
            parse_keys_page(&encoded),
            Some(KeysPage {
                keys: page_keys,
                next: token
            }),
            "{:?}",
            String::from_utf8_lossy(&encoded)
        );
    }
    let refused: &[&[u8]] = &[
        b"",
        b"+OK\r\n",
        b"-ERR syntax error\r\n",
        b"*1\r\n*2\r\n$1\r\na\r\n",
        b"*1\r\n*1\r\n$1\r\na\r\nextra",
        b"*3\r\n*0\r\n$1\r\nt\r\n$1\r\nu\r\n",
        b"*2\r\n*0\r\n",
        b"*1\r\n*99999999999\r\n",
        b"*1\r\n*1\r\n$5\r\nab\r\n",
        b"*1\r\n$1\r\na\r\n",
    ];
    for payload in refused {
        assert_eq!(
            parse_keys_page(payload),
            None,
            "{:?}",
            String::from_utf8_lossy(payload)
        );
    }
}
