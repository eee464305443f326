//! A Mosquitto 2.0 plugin through which the broker vouches for who sent a statestore request.
//!
//! On every publish to the store's request topics (the state store's and the device-bound
//! one, or the filters `plugin_opt_request_topics` names) it removes every client-supplied
//! user property named `__ssVouchedId` (`plugin_opt_property`) and appends one whose value is
//! the identity the broker authenticated: the user name (the certificate's CN with
//! `use_identity_as_username`), else the client id (`plugin_opt_identity`). With
//! `plugin_opt_check_response_topic true` it drops a request whose response topic lies outside
//! the client's own `clients/<client id>/`. The property is trustworthy only because the
//! broker sets it, and only behind a broker that loads this plugin on every listener. The node
//! side that will read it (`[auth] identity = "broker"`, issue 29 item 2) is not built yet:
//! today nodes ignore the property. See README.md.
//!
//! The decisions are pure and unit-tested ([`options`], [`topics`], [`decide`], [`rewrite`],
//! [`report`]); the C boundary is the one module with `unsafe` (`ffi`, declarations in
//! [`abi`]).

#![deny(unsafe_code)]

pub mod abi;
pub mod decide;
mod ffi;
pub mod options;
pub mod report;
pub mod rewrite;
pub mod topics;
