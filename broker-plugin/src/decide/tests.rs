//! The verdict for one publish.

use super::*;
use crate::options::{DEVICEBOUND_REQUEST_TOPIC, STATE_STORE_REQUEST_TOPIC};

fn client<'a>(client_id: Option<&'a str>, username: Option<&'a str>) -> Client<'a> {
    Client {
        client_id,
        username,
    }
}

#[test]
fn identity_sources() {
    use IdentitySource::*;
    let table = [
        (
            UsernameOrClientId,
            client(Some("c1"), Some("alice")),
            Some("alice"),
        ),
        (UsernameOrClientId, client(Some("c1"), None), Some("c1")),
        (UsernameOrClientId, client(Some("c1"), Some("")), Some("c1")),
        (UsernameOrClientId, client(None, None), None),
        (Username, client(Some("c1"), Some("alice")), Some("alice")),
        (Username, client(Some("c1"), None), None),
        (ClientId, client(Some("c1"), Some("alice")), Some("c1")),
        (ClientId, client(Some(""), Some("alice")), None),
    ];
    for (source, c, want) in table {
        assert_eq!(identity(source, c), want, "{source:?} {c:?}");
    }
}

/// Options, topic, client, response topic, the verdict.
type Row<'a> = (
    &'a Options,
    &'a str,
    Client<'a>,
    Option<&'a [u8]>,
    Verdict<'a>,
);

#[test]
fn verdicts() {
    let open = Options::default();
    let strict = Options {
        check_response_topic: true,
        ..Options::default()
    };
    let by_name = Options {
        identity: IdentitySource::Username,
        ..Options::default()
    };
    let ss = STATE_STORE_REQUEST_TOPIC;
    let db = DEVICEBOUND_REQUEST_TOPIC;
    let alice = client(Some("app1"), Some("alice"));
    let anon = client(Some("app1"), None);
    let own: &[u8] = b"clients/app1/statestore/response";
    let other: &[u8] = b"clients/app2/statestore/response";
    let table: Vec<Row> = vec![
        (
            &open,
            "some/other/topic",
            alice,
            Some(other),
            Verdict::NotARequest,
        ),
        (&open, ss, alice, Some(other), Verdict::Vouch("alice")),
        (&open, db, anon, None, Verdict::Vouch("app1")),
        (&strict, ss, alice, Some(own), Verdict::Vouch("alice")),
        (&strict, db, alice, Some(own), Verdict::Vouch("alice")),
        (&strict, ss, alice, None, Verdict::Vouch("alice")),
        (
            &strict,
            ss,
            alice,
            Some(other),
            Verdict::Refuse(Refusal::ResponseTopicOutside),
        ),
        (
            &strict,
            ss,
            alice,
            Some(b"clients/alice/x"),
            Verdict::Refuse(Refusal::ResponseTopicOutside),
        ),
        (
            &strict,
            ss,
            alice,
            Some(b"clients/app1/\xff"),
            Verdict::Refuse(Refusal::ResponseTopicOutside),
        ),
        (
            &strict,
            ss,
            client(None, Some("alice")),
            Some(own),
            Verdict::Refuse(Refusal::ResponseTopicOutside),
        ),
        (&strict, "x", alice, Some(other), Verdict::NotARequest),
        (
            &by_name,
            ss,
            anon,
            None,
            Verdict::Refuse(Refusal::NoIdentity),
        ),
        (&by_name, ss, alice, None, Verdict::Vouch("alice")),
    ];
    for (options, topic, c, rt, want) in table {
        assert_eq!(decide(options, topic, c, rt), want, "{topic} {c:?} {rt:?}");
    }
}
