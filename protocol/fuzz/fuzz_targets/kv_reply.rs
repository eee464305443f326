//! Fuzz target for `statestore kv`'s parsers of what comes back through the broker
//! (`kv::wire`: `parse_reply`, `parse_keys_page`, `parse_notification`, `notified_key`): never
//! panics, and a SCAN page it accepts, encoded again by the store's own encoder, parses to the
//! same page.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_protocol::client::{
    notified_key, parse_keys_page, parse_notification, parse_reply,
};
use statestore_protocol::scan::Page;

fuzz_target!(|input: &[u8]| {
    let _ = parse_reply(input);
    let _ = parse_notification(input);
    if let Ok(topic) = std::str::from_utf8(input) {
        let _ = notified_key(topic);
    }
    if let Some(page) = parse_keys_page(input) {
        let encoded = Page {
            keys: page.keys.clone(),
            next_token: page.next.clone(),
        }
        .encode();
        assert_eq!(parse_keys_page(&encoded), Some(page));
    }
});
