//! The hand-written ABI (`src/abi.rs`, `src/rewrite.rs`'s identifiers) against Mosquitto's
//! installed headers: a C program compiled with `cc` against /usr/include/mosquitto_broker.h,
//! mosquitto_plugin.h, mosquitto.h and mqtt_protocol.h (Debian 12: mosquitto-dev and
//! libmosquitto-dev, installed by scripts/prereqs.sh) prints every size, offset and constant
//! the crate relies on, and each is compared with the Rust declaration.

use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use statestore_mosquitto_plugin::abi::{self, EvtMessage, MosquittoOpt};
use statestore_mosquitto_plugin::rewrite::{Kind, id, kind};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#define P(name, value) printf("%s %ld\n", name, (long)(value))
#define M(field) P("evt_message." #field, offsetof(struct mosquitto_evt_message, field))
int main(void) {
    P("evt_message.size", sizeof(struct mosquitto_evt_message));
    P("evt_message.align", _Alignof(struct mosquitto_evt_message));
    M(future); M(client); M(topic); M(payload); M(properties); M(reason_string);
    M(payloadlen); M(qos); M(reason_code); M(retain); M(future2);
    P("opt.size", sizeof(struct mosquitto_opt));
    P("opt.key", offsetof(struct mosquitto_opt, key));
    P("opt.value", offsetof(struct mosquitto_opt, value));
    P("MOSQ_PLUGIN_VERSION", MOSQ_PLUGIN_VERSION);
    P("MOSQ_EVT_MESSAGE", MOSQ_EVT_MESSAGE);
    P("MOSQ_ERR_SUCCESS", MOSQ_ERR_SUCCESS);
    P("MOSQ_ERR_NOMEM", MOSQ_ERR_NOMEM);
    P("MOSQ_ERR_INVAL", MOSQ_ERR_INVAL);
    P("MOSQ_ERR_ACL_DENIED", MOSQ_ERR_ACL_DENIED);
    P("MOSQ_ERR_UNKNOWN", MOSQ_ERR_UNKNOWN);
    P("MOSQ_LOG_INFO", MOSQ_LOG_INFO);
    P("MOSQ_LOG_NOTICE", MOSQ_LOG_NOTICE);
    P("MOSQ_LOG_WARNING", MOSQ_LOG_WARNING);
    P("MOSQ_LOG_ERR", MOSQ_LOG_ERR);
    P("MQTT_PROP_PAYLOAD_FORMAT_INDICATOR", MQTT_PROP_PAYLOAD_FORMAT_INDICATOR);
    P("MQTT_PROP_CONTENT_TYPE", MQTT_PROP_CONTENT_TYPE);
    P("MQTT_PROP_RESPONSE_TOPIC", MQTT_PROP_RESPONSE_TOPIC);
    P("MQTT_PROP_CORRELATION_DATA", MQTT_PROP_CORRELATION_DATA);
    P("MQTT_PROP_USER_PROPERTY", MQTT_PROP_USER_PROPERTY);
    /* Every identifier's type as libmosquitto checks it: mosquitto_property_add_<type>
       refuses an identifier of another type (lib/property_mosq.c; 0 is MOSQ_ERR_SUCCESS).
       1 byte, 2 int16, 3 int32, 4 varint, 5 binary, 6 string, 7 string pair
       (enum mqtt5_property_type). */
    for (int i = 0; i < 256; i++) {
        mosquitto_property *l = NULL;
        int k = 0;
        if (mosquitto_property_add_byte(&l, i, 1) == 0) k = MQTT_PROP_TYPE_BYTE;
        else if (mosquitto_property_add_int16(&l, i, 1) == 0) k = MQTT_PROP_TYPE_INT16;
        else if (mosquitto_property_add_int32(&l, i, 1) == 0) k = MQTT_PROP_TYPE_INT32;
        else if (mosquitto_property_add_varint(&l, i, 1) == 0) k = MQTT_PROP_TYPE_VARINT;
        else if (mosquitto_property_add_binary(&l, i, "x", 1) == 0) k = MQTT_PROP_TYPE_BINARY;
        else if (mosquitto_property_add_string(&l, i, "x") == 0) k = MQTT_PROP_TYPE_STRING;
        else if (mosquitto_property_add_string_pair(&l, i, "x", "y") == 0)
            k = MQTT_PROP_TYPE_STRING_PAIR;
        mosquitto_property_free_all(&l);
        if (k) printf("kind.%d %d\n", i, k);
    }
    return 0;
}
"#;

fn header_values() -> Vec<(String, i64)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("layout.c");
    let binary = dir.path().join("layout");
    std::fs::write(&source, PROGRAM).expect("write layout.c");
    // The mosquitto_property_add_* functions are libmosquitto's (libmosquitto-dev); the broker
    // has its own copies of the same source (lib/property_mosq.c).
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-std=c11")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .arg("-lmosquitto")
        .output()
        .expect("a C compiler (cc)");
    assert!(
        cc.status.success(),
        "compiling against Mosquitto's headers failed (scripts/prereqs.sh installs mosquitto-dev \
         and libmosquitto-dev): {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&binary).output().expect("run layout");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn abi_matches_the_installed_headers() {
    let values = header_values();
    let get = |name: &str| {
        values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} not printed"))
    };
    let n = |v: usize| i64::try_from(v).expect("small");
    let rust = [
        ("evt_message.size", n(size_of::<EvtMessage>())),
        ("evt_message.align", n(align_of::<EvtMessage>())),
        ("evt_message.future", n(offset_of!(EvtMessage, future))),
        ("evt_message.client", n(offset_of!(EvtMessage, client))),
        ("evt_message.topic", n(offset_of!(EvtMessage, topic))),
        ("evt_message.payload", n(offset_of!(EvtMessage, payload))),
        (
            "evt_message.properties",
            n(offset_of!(EvtMessage, properties)),
        ),
        (
            "evt_message.reason_string",
            n(offset_of!(EvtMessage, reason_string)),
        ),
        (
            "evt_message.payloadlen",
            n(offset_of!(EvtMessage, payloadlen)),
        ),
        ("evt_message.qos", n(offset_of!(EvtMessage, qos))),
        (
            "evt_message.reason_code",
            n(offset_of!(EvtMessage, reason_code)),
        ),
        ("evt_message.retain", n(offset_of!(EvtMessage, retain))),
        ("evt_message.future2", n(offset_of!(EvtMessage, future2))),
        ("opt.size", n(size_of::<MosquittoOpt>())),
        ("opt.key", n(offset_of!(MosquittoOpt, key))),
        ("opt.value", n(offset_of!(MosquittoOpt, value))),
        ("MOSQ_PLUGIN_VERSION", i64::from(abi::MOSQ_PLUGIN_VERSION)),
        ("MOSQ_EVT_MESSAGE", i64::from(abi::MOSQ_EVT_MESSAGE)),
        ("MOSQ_ERR_SUCCESS", i64::from(abi::MOSQ_ERR_SUCCESS)),
        ("MOSQ_ERR_NOMEM", i64::from(abi::MOSQ_ERR_NOMEM)),
        ("MOSQ_ERR_INVAL", i64::from(abi::MOSQ_ERR_INVAL)),
        ("MOSQ_ERR_ACL_DENIED", i64::from(abi::MOSQ_ERR_ACL_DENIED)),
        ("MOSQ_ERR_UNKNOWN", i64::from(abi::MOSQ_ERR_UNKNOWN)),
        ("MOSQ_LOG_INFO", i64::from(abi::MOSQ_LOG_INFO)),
        ("MOSQ_LOG_NOTICE", i64::from(abi::MOSQ_LOG_NOTICE)),
        ("MOSQ_LOG_WARNING", i64::from(abi::MOSQ_LOG_WARNING)),
        ("MOSQ_LOG_ERR", i64::from(abi::MOSQ_LOG_ERR)),
        (
            "MQTT_PROP_PAYLOAD_FORMAT_INDICATOR",
            i64::from(id::PAYLOAD_FORMAT_INDICATOR),
        ),
        ("MQTT_PROP_CONTENT_TYPE", i64::from(id::CONTENT_TYPE)),
        ("MQTT_PROP_RESPONSE_TOPIC", i64::from(id::RESPONSE_TOPIC)),
        (
            "MQTT_PROP_CORRELATION_DATA",
            i64::from(id::CORRELATION_DATA),
        ),
        ("MQTT_PROP_USER_PROPERTY", i64::from(id::USER_PROPERTY)),
    ];
    for (name, value) in rust {
        assert_eq!(value, get(name), "{name}: Rust declaration vs header");
    }
    // Every identifier's type: `kind` as libmosquitto's add functions check it.
    let theirs: Vec<(i32, i64)> = values
        .iter()
        .filter_map(|(n, v)| Some((n.strip_prefix("kind.")?.parse().ok()?, *v)))
        .collect();
    let ours: Vec<(i32, i64)> = (0..256)
        .filter_map(|i| {
            let k = match kind(i)? {
                Kind::Byte => 1,
                Kind::Int16 => 2,
                Kind::Int32 => 3,
                Kind::Varint => 4,
                Kind::Binary => 5,
                Kind::String => 6,
                Kind::StringPair => 7,
            };
            Some((i, k))
        })
        .collect();
    assert_eq!(
        ours, theirs,
        "property identifiers and types vs libmosquitto"
    );
}
