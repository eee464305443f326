//! Property kinds and the rewriting of a request's property list.

use super::*;

const NAME: &str = "__ssVouchedId";

fn user(name: &str, value: &str) -> Prop {
    Prop::Pair(
        id::USER_PROPERTY,
        name.as_bytes().to_vec(),
        value.as_bytes().to_vec(),
    )
}

#[test]
fn kinds_follow_mqtt_protocol_h() {
    let table = [
        (1, Some(Kind::Byte)),
        (2, Some(Kind::Int32)),
        (3, Some(Kind::String)),
        (8, Some(Kind::String)),
        (9, Some(Kind::Binary)),
        (11, Some(Kind::Varint)),
        (17, Some(Kind::Int32)),
        (22, Some(Kind::Binary)),
        (35, Some(Kind::Int16)),
        (38, Some(Kind::StringPair)),
        (42, Some(Kind::Byte)),
        (0, None),
        (4, None),
        (43, None),
        (-1, None),
    ];
    for (identifier, want) in table {
        assert_eq!(kind(identifier), want, "{identifier}");
    }
}

#[test]
fn vouching_rewrites() {
    let rt = Prop::String(id::RESPONSE_TOPIC, b"clients/a/r".to_vec());
    let cd = Prop::Binary(id::CORRELATION_DATA, vec![1, 2, 3]);
    let pfi = Prop::Byte(id::PAYLOAD_FORMAT_INDICATOR, 1);
    let ct = Prop::String(id::CONTENT_TYPE, b"application/octet-stream".to_vec());
    let table: Vec<(Vec<Prop>, Vec<Prop>, usize)> = vec![
        // Nothing to remove: appended.
        (vec![], vec![user(NAME, "alice")], 0),
        (
            vec![rt.clone(), cd.clone(), user("__srcId", "app1")],
            vec![
                rt.clone(),
                cd.clone(),
                user("__srcId", "app1"),
                user(NAME, "alice"),
            ],
            0,
        ),
        // A forged copy (and a second one) removed, the order of the rest kept.
        (
            vec![
                user(NAME, "forged"),
                rt.clone(),
                user(NAME, "again"),
                pfi.clone(),
                ct.clone(),
            ],
            vec![rt.clone(), pfi.clone(), ct.clone(), user(NAME, "alice")],
            2,
        ),
        // Names are exact: other spellings stay (the node reads only the exact name).
        (
            vec![user("__ssvouchedid", "x"), user("__ssVouchedId ", "y")],
            vec![
                user("__ssvouchedid", "x"),
                user("__ssVouchedId ", "y"),
                user(NAME, "alice"),
            ],
            0,
        ),
        // A user property whose value is the name is not the property.
        (
            vec![user("x", NAME)],
            vec![user("x", NAME), user(NAME, "alice")],
            0,
        ),
    ];
    for (input, want, removed) in table {
        let got = vouch(input.clone(), NAME, "alice");
        assert_eq!(got, (want, removed), "{input:?}");
        assert_eq!(
            got.0
                .iter()
                .filter(|p| matches!(p, Prop::Pair(_, n, _) if n == NAME.as_bytes()))
                .count(),
            1
        );
    }
}

#[test]
fn response_topic_is_the_first_response_topic_property() {
    let table: Vec<(Vec<Prop>, Option<&[u8]>)> = vec![
        (vec![], None),
        (vec![user("responseTopic", "x")], None),
        (vec![Prop::String(id::CONTENT_TYPE, b"x".to_vec())], None),
        (
            vec![
                user("a", "b"),
                Prop::String(id::RESPONSE_TOPIC, b"clients/a/r".to_vec()),
            ],
            Some(b"clients/a/r"),
        ),
    ];
    for (props, want) in table {
        assert_eq!(response_topic(&props), want, "{props:?}");
    }
}

#[test]
fn identifiers() {
    assert_eq!(user("a", "b").identifier(), 38);
    assert_eq!(Prop::Varint(11, 5).identifier(), 11);
}
