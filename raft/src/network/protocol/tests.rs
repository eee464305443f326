//! Unit tests of [`super`]: frame encoding and the pre-hello frame limit.

use tokio_util::codec::Decoder;

use super::*;

#[test]
fn hello_round_trips_and_garbage_is_an_error() {
    let frame = encode(&Request::Hello {
        protocol: PROTOCOL_VERSION,
        from: Some(3),
    });
    let back: Request = decode("request", &BytesMut::from(&frame[..])).expect("decodes");
    assert!(matches!(
        back,
        Request::Hello {
            protocol: PROTOCOL_VERSION,
            from: Some(3)
        }
    ));
    let garbage = BytesMut::from(&[codec::FORMAT_VERSION, 0xee, 0xff][..]);
    assert!(decode::<Request>("request", &garbage).is_err());
}

/// A frame body behind a 4-byte big-endian length, as the codec writes it.
fn framed(len: u32, body: &[u8]) -> BytesMut {
    let mut bytes = BytesMut::from(&len.to_be_bytes()[..]);
    bytes.extend_from_slice(body);
    bytes
}

#[test]
fn before_the_hello_a_large_length_header_is_refused_without_reserving_it() {
    let hello = encode(&Request::Hello {
        protocol: PROTOCOL_VERSION,
        from: Some(u64::MAX),
    });
    assert!(
        hello.len() * 16 < HELLO_FRAME_BYTES,
        "a hello ({} bytes) fits the pre-hello limit many times over",
        hello.len()
    );

    // A header claiming 100 MiB: refused as soon as the header is read, the buffer not
    // grown towards it.
    let mut codec = framing_before_hello();
    let mut src = framed(100 << 20, b"x");
    let err = codec.decode(&mut src).expect_err("oversized");
    assert!(is_oversized(&err), "{err}");
    assert!(src.capacity() < HELLO_FRAME_BYTES, "{}", src.capacity());
    // The full codec would have reserved it.
    let mut src = framed(100 << 20, b"x");
    assert!(framing().decode(&mut src).expect("waits").is_none());
    assert!(src.capacity() >= 100 << 20, "the old behaviour: reserved");

    // A hello passes; after it the limit is the full one.
    let mut codec = framing_before_hello();
    let mut src = framed(hello.len() as u32, &hello);
    let frame = codec.decode(&mut src).expect("decodes").expect("a frame");
    assert!(matches!(
        decode::<Request>("request", &frame).expect("hello"),
        Request::Hello { .. }
    ));
    accept_after_hello(&mut codec);
    let big = vec![7u8; 64 << 10];
    let mut src = framed(big.len() as u32, &big);
    let frame = codec.decode(&mut src).expect("decodes").expect("a frame");
    assert_eq!(frame.len(), big.len());
    let mut src = framed((MAX_FRAME_BYTES + 1) as u32, b"");
    assert!(is_oversized(
        &codec.decode(&mut src).expect_err("over the full limit")
    ));
    // Other errors are not mistaken for it.
    assert!(!is_oversized(&std::io::Error::other("reset")));
}

#[test]
fn a_remote_error_round_trips_and_shows_the_servers_message() {
    let stopped = RemoteError::stopped("the log is gone");
    assert_eq!(stopped.kind, RemoteErrorKind::Stopped);
    assert_eq!(stopped.to_string(), "the log is gone");
    let frame = encode(&Response::ChangeMembership(Err(stopped.clone())));
    let back: Response = decode("response", &BytesMut::from(&frame[..])).expect("decodes");
    assert!(matches!(back, Response::ChangeMembership(Err(e)) if e == stopped));

    let not_leader = RemoteError::from_error(&Error::NotLeader { leader: Some(2) });
    assert_eq!(not_leader.kind, RemoteErrorKind::NotLeader);
    assert_eq!(not_leader.kind.label(), "not_leader");
    assert_eq!(not_leader.message, "not the leader (leader: Some(2))");
    let refused = RemoteError::from_error(&Error::LearnerSilent {
        id: 4,
        addr: "n4:7481".into(),
        within: std::time::Duration::from_secs(1),
    });
    assert_eq!(refused.kind, RemoteErrorKind::Refused);
}

/// The hello and the refusal are what every version reads, so that peers of different
/// versions learn why they cannot talk: their encoding must not change with the version.
#[test]
fn the_hello_and_the_refusal_keep_their_encoding_across_versions() {
    let hello = encode(&Request::Hello {
        protocol: 5,
        from: Some(3),
    });
    assert_eq!(&hello[..], [codec::FORMAT_VERSION, 0, 5, 1, 3]);
    let answer = encode(&Response::Hello { protocol: 5 });
    assert_eq!(&answer[..], [codec::FORMAT_VERSION, 0, 5]);
    let refused = encode(&Response::Refused("no".into()));
    assert_eq!(&refused[..], [codec::FORMAT_VERSION, 6, 2, b'n', b'o']);
}
