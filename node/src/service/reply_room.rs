//! Room for a large reply, taken in the outbound budget's replies lane before the reply is
//! built ([`crate::outbound`]). A GET of a 4 MiB value is charged ~1 KiB at intake; were its
//! reply built first and then queued, a task waiting for room would hold 4 MiB no budget
//! counts, and thousands of such GETs could wait at once. Instead a read that finds no room
//! lets go of what it read, waits for room holding nothing, and reads again: every reply
//! bigger than a request's own small allowance is in the outbound budget from the moment it
//! exists until the broker acknowledges it.

use crate::outbound::{self, Charge, Lane, PROPERTY_OVERHEAD_BYTES};
use crate::service::envelope::{self, Envelope};
use crate::transport::Outbox;
use statestore_protocol::Reply;

/// Slack added to a payload estimate (a RESP3 bulk string's `$<len>\r\n` and `\r\n`).
const PAYLOAD_FRAMING_BYTES: usize = 32;

/// The framing of one bulk string at most: `$`, up to 20 digits, two CRLFs.
const BULK_FRAMING_BYTES: usize = 25;

/// About the encoded size of `reply` (with [`PAYLOAD_FRAMING_BYTES`] on top, never less),
/// without encoding a large one.
pub fn payload_bytes(reply: &Reply) -> usize {
    match reply {
        Reply::Bulk(value) => value.len(),
        Reply::Keys(page) => {
            let keys: usize = page
                .keys
                .iter()
                .map(|key| key.len() + BULK_FRAMING_BYTES)
                .sum();
            let token = page
                .next_token
                .as_ref()
                .map_or(0, |token| token.len() + BULK_FRAMING_BYTES);
            keys + token
        }
        other => other.encode().len(),
    }
}

/// The room one request's reply holds (none until it needs some).
pub struct ReplyRoom {
    charge: Option<Charge>,
    /// The bytes of a reply to this envelope with an empty payload and no `__ts`.
    headers: usize,
}

impl ReplyRoom {
    /// No room yet, for a reply to `envelope` from `node_client_id` (what [`envelope::reply`]
    /// sends besides its payload and `__ts`, counted as [`outbound::message_bytes`] counts it,
    /// without building it: this runs for every request).
    pub fn new(envelope: &Envelope, node_client_id: &str) -> Self {
        let properties: usize = [
            ("__stat", "200"),
            ("__protVer", envelope::PROTOCOL_VERSION),
            ("__srcId", node_client_id),
        ]
        .iter()
        .map(|(name, value)| name.len() + value.len() + PROPERTY_OVERHEAD_BYTES)
        .sum();
        ReplyRoom {
            charge: None,
            headers: envelope.response_topic.len()
                + envelope.correlation_data.len()
                + envelope::CONTENT_TYPE.len()
                + properties
                + outbound::MESSAGE_OVERHEAD_BYTES,
        }
    }

    /// What a reply with a payload of about `payload_bytes` and a `__ts` of `version_bytes`
    /// (if any) is charged at most.
    pub fn reply_bytes(&self, payload_bytes: usize, version_bytes: Option<usize>) -> usize {
        let version = version_bytes.map_or(0, |v| "__ts".len() + v + PROPERTY_OVERHEAD_BYTES);
        self.headers + payload_bytes + PAYLOAD_FRAMING_BYTES + version
    }

    /// True once room for `bytes` is held: kept from an earlier call, or taken now if the
    /// replies lane has it. False: the caller lets go of what it read, calls
    /// [`ReplyRoom::wait`] and reads again.
    pub fn fits(&mut self, outbox: &impl Outbox, bytes: usize) -> bool {
        if self.charge.as_ref().is_some_and(|c| c.bytes() >= bytes) {
            return true;
        }
        self.charge = None;
        self.charge = outbox.try_charge(Lane::for_reply(bytes), bytes);
        self.charge.is_some()
    }

    /// Waits until the reply's lane (the bulk lane for a large reply) has room for `bytes`,
    /// holding no room meanwhile (a task holding room while it waits for more could wait for
    /// ever on others doing the same).
    pub async fn wait(&mut self, outbox: &impl Outbox, bytes: usize) {
        self.charge = None;
        self.charge = Some(outbox.charge(Lane::for_reply(bytes), bytes).await);
    }

    /// The room held, for [`Outbox::publish_charged`].
    pub fn take(&mut self) -> Option<Charge> {
        self.charge.take()
    }
}

#[cfg(test)]
mod tests;
