//! Mosquitto 2.0's plugin ABI as this crate uses it, declared by hand from Debian 12's headers
//! (mosquitto-dev / libmosquitto-dev 2.0.11: mosquitto_broker.h, mosquitto_plugin.h,
//! mosquitto.h, mqtt_protocol.h). Declarations only: the calls are in the private `ffi` module.
//! `tests/headers.rs` compiles a C program against the installed headers and checks every
//! size, offset and constant here against it.

use std::ffi::{c_char, c_int, c_void};

/// `MOSQ_PLUGIN_VERSION` (mosquitto_plugin.h): the version-5 plugin interface.
pub const MOSQ_PLUGIN_VERSION: c_int = 5;
/// `MOSQ_EVT_MESSAGE` (mosquitto_broker.h, `enum mosquitto_plugin_event`).
pub const MOSQ_EVT_MESSAGE: c_int = 7;

/// `MOSQ_ERR_SUCCESS` (mosquitto.h, `enum mosq_err_t`).
pub const MOSQ_ERR_SUCCESS: c_int = 0;
/// `MOSQ_ERR_NOMEM`.
pub const MOSQ_ERR_NOMEM: c_int = 1;
/// `MOSQ_ERR_INVAL`.
pub const MOSQ_ERR_INVAL: c_int = 3;
/// `MOSQ_ERR_ACL_DENIED`: from a message callback, the broker drops the PUBLISH (PUBACK /
/// PUBREC "not authorized" at QoS 1 / 2) and keeps the client connected (src/handle_publish.c).
pub const MOSQ_ERR_ACL_DENIED: c_int = 12;
/// `MOSQ_ERR_UNKNOWN`.
pub const MOSQ_ERR_UNKNOWN: c_int = 13;

/// `MOSQ_LOG_INFO` (mosquitto.h).
pub const MOSQ_LOG_INFO: c_int = 1 << 0;
/// `MOSQ_LOG_NOTICE`.
pub const MOSQ_LOG_NOTICE: c_int = 1 << 1;
/// `MOSQ_LOG_WARNING`.
pub const MOSQ_LOG_WARNING: c_int = 1 << 2;
/// `MOSQ_LOG_ERR`.
pub const MOSQ_LOG_ERR: c_int = 1 << 3;

/// `struct mosquitto` (opaque).
#[repr(C)]
pub struct Mosquitto {
    _opaque: [u8; 0],
}

/// `mosquitto_property` (`struct mqtt5__property`, opaque: reached only through the
/// `mosquitto_property_*` functions).
#[repr(C)]
pub struct MosquittoProperty {
    _opaque: [u8; 0],
}

/// `mosquitto_plugin_id_t` (opaque).
#[repr(C)]
pub struct PluginId {
    _opaque: [u8; 0],
}

/// `struct mosquitto_opt` (mosquitto_plugin.h): one `plugin_opt_<key> <value>` line.
#[repr(C)]
pub struct MosquittoOpt {
    /// The key without `plugin_opt_`.
    pub key: *mut c_char,
    /// The value.
    pub value: *mut c_char,
}

/// `struct mosquitto_evt_message` (mosquitto_broker.h): the data of `MOSQ_EVT_MESSAGE`. The
/// broker copies `topic`, `payload`, `properties` and `retain` back after the callbacks
/// (src/plugin.c `plugin__handle_message`); it does not free a replaced property list.
#[repr(C)]
pub struct EvtMessage {
    /// Reserved.
    pub future: *mut c_void,
    /// The publishing client.
    pub client: *mut Mosquitto,
    /// The topic.
    pub topic: *mut c_char,
    /// The payload.
    pub payload: *mut c_void,
    /// The PUBLISH's properties the broker keeps (payload format, content type, response
    /// topic, correlation data, user properties).
    pub properties: *mut MosquittoProperty,
    /// Reason string (unused in 2.0.11's message event).
    pub reason_string: *mut c_char,
    /// Payload length.
    pub payloadlen: u32,
    /// QoS.
    pub qos: u8,
    /// Reason code (unused in 2.0.11's message event).
    pub reason_code: u8,
    /// Retain flag.
    pub retain: bool,
    /// Reserved.
    pub future2: [*mut c_void; 4],
}

/// `MOSQ_FUNC_generic_callback`.
pub type Callback = unsafe extern "C" fn(c_int, *mut c_void, *mut c_void) -> c_int;
