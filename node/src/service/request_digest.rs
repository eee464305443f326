//! The digest of a request that the reply memory keeps next to its reply (protocol §6): a
//! retry, the same PUBLISH again, has the same digest; another request that claims the same
//! client id and correlation data almost surely has another, and is executed as new instead
//! of being answered with the first one's reply.
//!
//! It covers what decides a request's effect: the topic (a device's settlement names its lock
//! token there), the payload, and the user properties that change the effect, which the
//! caller picks ([`EffectProperties`]). Not the others: `__ts` (the stamp, not the effect),
//! `traceparent` / `tracestate` (tracing), `__srcId` and the correlation data (the identity
//! itself), `__protVer`, and the `__fwd` mark of a forwarded device publish: a client may set
//! them anew on a retry. `statestore kv` and the SDKs resend the same PUBLISH, so nothing
//! changes for them.
//!
//! xxh3-128 is not a cryptographic hash, and needs not be: the identity is already the
//! client's, and the digest only has to tell a client's own retry from a different request;
//! a forger who makes a colliding request gets at most the reply of the request it copied.

use xxhash_rust::xxh3::Xxh3;

use crate::transport::InboundMessage;

/// Which user properties change a request's effect, by its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectProperties {
    /// A state store request: `__ft`, its fencing token.
    StateStore,
    /// A device-bound SEND: its application properties (every name not starting with `__`),
    /// which become the message's.
    DeviceSend,
    /// Any other request: none (the topic and payload say everything).
    None,
}

/// The request digest of `message`, counting the user properties `which` names.
pub fn request_digest(message: &InboundMessage, which: EffectProperties) -> u128 {
    let mut hasher = Xxh3::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
        hasher.update(bytes);
    };
    field(message.topic.as_bytes());
    field(&message.payload);
    let counts = |name: &str| match which {
        EffectProperties::StateStore => name == "__ft",
        EffectProperties::DeviceSend => !name.starts_with("__"),
        EffectProperties::None => false,
    };
    for (name, value) in message.user_properties.iter().filter(|(n, _)| counts(n)) {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    hasher.digest128()
}

#[cfg(test)]
mod tests;
