//! The decision for one publish: not a store request (left alone), a request to vouch for
//! (with the identity the broker knows), or a request to refuse (and why).

use crate::options::{IdentitySource, Options};
use crate::topics::{is_request, response_topic_inside};

/// What the broker knows about the publishing client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Client<'a> {
    /// Its MQTT client id.
    pub client_id: Option<&'a str>,
    /// Its authenticated user name (with `use_identity_as_username`: the certificate's CN).
    pub username: Option<&'a str>,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The configured identity source gives nothing (`identity username` and no user name).
    NoIdentity,
    /// The response topic lies outside `clients/<client id>/` (`check_response_topic true`).
    ResponseTopicOutside,
}

impl Refusal {
    /// A short reason for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoIdentity => "no identity for the configured source",
            Refusal::ResponseTopicOutside => "response topic outside clients/<client id>/",
        }
    }
}

/// What to do with one publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Not a store request: passed on untouched.
    NotARequest,
    /// A store request: strip the client's copies of the property and add this identity.
    Vouch(&'a str),
    /// A store request that is dropped (counted, logged).
    Refuse(Refusal),
}

/// The identity `source` takes from `client`; an empty value counts as none.
pub fn identity<'a>(source: IdentitySource, client: Client<'a>) -> Option<&'a str> {
    let username = client.username.filter(|u| !u.is_empty());
    let client_id = client.client_id.filter(|c| !c.is_empty());
    match source {
        IdentitySource::UsernameOrClientId => username.or(client_id),
        IdentitySource::Username => username,
        IdentitySource::ClientId => client_id,
    }
}

/// Decides for a publish to `topic` by `client` whose response topic property is
/// `response_topic` (raw bytes, `None` when absent; a request without one is not refused: no
/// reply goes anywhere).
pub fn decide<'a>(
    options: &Options,
    topic: &str,
    client: Client<'a>,
    response_topic: Option<&[u8]>,
) -> Verdict<'a> {
    if !is_request(&options.request_topics, topic) {
        return Verdict::NotARequest;
    }
    let Some(id) = identity(options.identity, client) else {
        return Verdict::Refuse(Refusal::NoIdentity);
    };
    if options.check_response_topic
        && let Some(rt) = response_topic
    {
        let inside = match (client.client_id, std::str::from_utf8(rt)) {
            (Some(cid), Ok(rt)) => response_topic_inside(cid, rt),
            _ => false,
        };
        if !inside {
            return Verdict::Refuse(Refusal::ResponseTopicOutside);
        }
    }
    Verdict::Vouch(id)
}

#[cfg(test)]
mod tests;
