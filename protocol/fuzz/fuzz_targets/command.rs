//! Fuzz target for `parse_command` (spec §2, §5, §9): must never panic under the
//! default limits or tiny ones, accepted commands must respect the limits, and
//! `sniff_verb` must agree with every successful parse.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_protocol::{
    Command, ErrorReply, ProtocolLimits, Reply, parse_command, sniff_verb,
};

fn check(payload: &[u8], limits: &ProtocolLimits) {
    let sniffed_verb = sniff_verb(payload);
    match parse_command(payload, limits) {
        Ok(command) => {
            assert_eq!(command.verb(), sniffed_verb);
            if let Some(key) = command.key() {
                assert!(!key.is_empty() && key.len() <= limits.max_key_bytes);
            }
            match command {
                Command::Set {
                    value,
                    expire_after_ms,
                    ..
                } => {
                    assert!(value.len() <= limits.max_value_bytes);
                    if let Some(milliseconds) = expire_after_ms {
                        assert!((1..=limits.max_px_ms).contains(&milliseconds));
                    }
                }
                Command::VDel { value, .. } => assert!(value.len() <= limits.max_value_bytes),
                Command::Scan { pattern, after } => {
                    if let Some(after) = after {
                        assert!(after.len() <= limits.max_key_bytes);
                    }
                    // Matching any key never panics.
                    let _ = pattern.matches(payload);
                }
                Command::Get { .. } | Command::Del { .. } | Command::KeyNotify { .. } => {}
            }
        }
        Err(error) => {
            let encoded = Reply::Error(ErrorReply::from(error)).encode();
            assert!(encoded.starts_with(b"-ERR ") && encoded.ends_with(b"\r\n"));
        }
    }
}

fuzz_target!(|payload: &[u8]| {
    check(payload, &ProtocolLimits::default());
    check(
        payload,
        &ProtocolLimits {
            max_key_bytes: 4,
            max_value_bytes: 8,
            max_array_len: 6,
            max_px_ms: 1000,
        },
    );
});
