//! Fuzz target for the peer wire codec (`statestore_raft::network::protocol`): the bytes of a
//! connection split by `framing()` (tokio-util's `LengthDelimitedCodec`, 128 MiB limit), and the
//! input as one frame body, decoded as a `Request` and as a `Response`. Never panics; a decoded
//! message re-encodes to bytes that decode again and re-encode to the same bytes (the messages
//! have no `PartialEq`: their encoding stands for their value), and that body survives the
//! framing unchanged. The server's own frame handling (limits before `Hello`) is not covered
//! here: only the codec and decode layer.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;
use statestore_raft::network::protocol::{Request, Response, decode, encode, framing};
use tokio_util::codec::{Decoder, Encoder};

fn round_trip<T: Serialize + DeserializeOwned>(what: &'static str, body: &BytesMut) {
    let Ok(message) = decode::<T>(what, body) else {
        return;
    };
    let once = encode(&message);
    let again: T = decode(what, &BytesMut::from(&once[..])).expect("a re-encoded message decodes");
    assert_eq!(encode(&again), once, "{what} re-encodes to the same bytes");

    let mut wire = BytesMut::new();
    framing()
        .encode(Bytes::clone(&once), &mut wire)
        .expect("within the frame limit");
    let framed = framing()
        .decode(&mut wire)
        .expect("a frame")
        .expect("a whole frame");
    assert_eq!(&framed[..], &once[..]);
    assert!(wire.is_empty());
}

fuzz_target!(|input: &[u8]| {
    let mut codec = framing();
    let mut stream = BytesMut::from(input);
    while let Ok(Some(frame)) = codec.decode(&mut stream) {
        round_trip::<Request>("request", &frame);
        round_trip::<Response>("response", &frame);
    }
    let body = BytesMut::from(input);
    round_trip::<Request>("request", &body);
    round_trip::<Response>("response", &body);
});
