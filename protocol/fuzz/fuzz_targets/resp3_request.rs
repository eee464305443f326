//! Fuzz target for `parse_request` (spec §2, §9): must never panic, and every
//! payload it accepts must respect the limits and round-trip through the encoder.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_protocol::{ProtocolLimits, encode_bulk, parse_request};

fuzz_target!(|payload: &[u8]| {
    let limits = ProtocolLimits::default();
    let Ok(elements) = parse_request(payload, &limits) else {
        return;
    };
    assert!((1..=limits.max_array_len).contains(&elements.len()));
    let payload_range = payload.as_ptr_range();
    for element in &elements {
        assert!(element.len() <= limits.max_bulk_bytes());
        assert!(element.is_empty() || payload_range.contains(&element.as_ptr()));
    }
    let mut reencoded = format!("*{}\r\n", elements.len()).into_bytes();
    for element in &elements {
        encode_bulk(&mut reencoded, element);
    }
    assert!(
        reencoded.len() <= payload.len(),
        "only leading zeros can make input longer"
    );
    assert_eq!(
        parse_request(&reencoded, &limits).as_deref(),
        Ok(elements.as_slice())
    );
});
