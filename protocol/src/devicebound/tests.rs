//! Tests of the device-bound codecs, kept apart from the code: tables from
//! `devicebound.md` and `protocol.md` (each case names its section), and
//! property tests.

mod feedback_table;
mod properties;
mod property_bag_table;
mod reply_table;
mod request_table;
mod time_table;
mod topic_table;

use super::request::{Ack, Expiry, SendRequest};
use crate::resp3::encode_bulk;

/// A request array of `elements`, as a client would send it.
fn encode_elements(elements: &[&[u8]]) -> Vec<u8> {
    let mut payload = format!("*{}\r\n", elements.len()).into_bytes();
    for element in elements {
        encode_bulk(&mut payload, element);
    }
    payload
}

/// A SEND without options.
fn send<'a>(device_id: &'a str, message_id: &'a str, body: &'a [u8]) -> SendRequest<'a> {
    SendRequest {
        device_id,
        message_id,
        body,
        expiry: Expiry::Default,
        ack: Ack::None,
        generation: None,
        content_type: None,
        content_encoding: None,
    }
}
