//! Tests of the device-bound codecs, kept apart from the code: tables from
//! `devicebound.md` and `protocol.md` (cases cite their section), and property tests.
