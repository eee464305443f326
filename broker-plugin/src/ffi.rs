//! The boundary with Mosquitto: the three exported entry points of a version-5 plugin
//! (`mosquitto_plugin_version`, `mosquitto_plugin_init`, `mosquitto_plugin_cleanup`), the
//! `MOSQ_EVT_MESSAGE` callback, and the conversions between Mosquitto's property list and
//! [`Prop`]. Every decision is made by the pure modules; every entry point catches panics (none
//! crosses into C), and a request the plugin cannot rewrite is dropped (fails closed).
//!
//! Memory: the broker's symbols are resolved from the `mosquitto` executable when it loads the
//! .so. Values read with `mosquitto_property_read_*` are allocated with the C library's
//! `calloc` (lib/property_mosq.c) and freed here with `free`; property lists are built with
//! `mosquitto_property_add_*` and freed with `mosquitto_property_free_all`, the broker's own
//! allocator on both sides.

#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{
    Callback, EvtMessage, MOSQ_ERR_ACL_DENIED, MOSQ_ERR_INVAL, MOSQ_ERR_SUCCESS, MOSQ_ERR_UNKNOWN,
    MOSQ_EVT_MESSAGE, MOSQ_LOG_ERR, MOSQ_LOG_INFO, MOSQ_LOG_NOTICE, MOSQ_LOG_WARNING,
    MOSQ_PLUGIN_VERSION, Mosquitto, MosquittoOpt, MosquittoProperty, PluginId,
};
use crate::decide::{Client, Refusal, Verdict, decide};
use crate::options::{MAX_OPTIONS, Options};
use crate::report::{
    Admit, Counters, DropLog, MAX_LOGGED_CHARS, ReportClock, shorten, shorten_bytes,
};
use crate::rewrite::{Kind, MAX_PROPERTIES, Prop, kind, response_topic, vouch};
use crate::topics::is_request;

unsafe extern "C" {
    fn mosquitto_callback_register(
        identifier: *mut PluginId,
        event: c_int,
        cb_func: Callback,
        event_data: *const c_void,
        userdata: *mut c_void,
    ) -> c_int;
    fn mosquitto_callback_unregister(
        identifier: *mut PluginId,
        event: c_int,
        cb_func: Callback,
        event_data: *const c_void,
    ) -> c_int;
    fn mosquitto_log_printf(level: c_int, fmt: *const c_char, ...);
    fn mosquitto_client_id(client: *const Mosquitto) -> *const c_char;
    fn mosquitto_client_username(client: *const Mosquitto) -> *const c_char;

    fn mosquitto_property_identifier(property: *const MosquittoProperty) -> c_int;
    fn mosquitto_property_next(proplist: *const MosquittoProperty) -> *const MosquittoProperty;
    fn mosquitto_property_read_byte(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut u8,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_int16(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut u16,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_int32(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut u32,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_varint(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut u32,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_binary(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut *mut c_void,
        len: *mut u16,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_string(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        value: *mut *mut c_char,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_read_string_pair(
        proplist: *const MosquittoProperty,
        identifier: c_int,
        name: *mut *mut c_char,
        value: *mut *mut c_char,
        skip_first: bool,
    ) -> *const MosquittoProperty;
    fn mosquitto_property_add_byte(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: u8,
    ) -> c_int;
    fn mosquitto_property_add_int16(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: u16,
    ) -> c_int;
    fn mosquitto_property_add_int32(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: u32,
    ) -> c_int;
    fn mosquitto_property_add_varint(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: u32,
    ) -> c_int;
    fn mosquitto_property_add_binary(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: *const c_void,
        len: u16,
    ) -> c_int;
    fn mosquitto_property_add_string(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        value: *const c_char,
    ) -> c_int;
    fn mosquitto_property_add_string_pair(
        proplist: *mut *mut MosquittoProperty,
        identifier: c_int,
        name: *const c_char,
        value: *const c_char,
    ) -> c_int;
    fn mosquitto_property_free_all(properties: *mut *mut MosquittoProperty);

    /// The C library's `free`, for the values `mosquitto_property_read_*` `calloc`s.
    fn free(ptr: *mut c_void);
}

/// The plugin's state, owned by Mosquitto as the `userdata` pointer between init and cleanup.
struct State {
    identifier: *mut PluginId,
    options: Options,
    counters: Counters,
    drops: Mutex<DropLog>,
    clock: Mutex<ReportClock>,
}

/// Logs `text` through the broker (`mosquitto_log_printf(level, "%s", text)`).
fn log(level: c_int, text: &str) {
    let Ok(line) = CString::new(text.replace('\0', "\\0")) else {
        return;
    };
    // SAFETY: the format is a NUL-terminated "%s" and the one variadic argument is a
    // NUL-terminated C string that lives until the call returns.
    unsafe { mosquitto_log_printf(level, c"%s".as_ptr(), line.as_ptr()) };
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A C string the broker owns as `&str`; `None` for NULL or non-UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the returned reference.
unsafe fn borrowed_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Takes a string `mosquitto_property_read_*` allocated: copied, then freed.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string from the C library's allocator, not used after.
unsafe fn take_c_string(p: *mut c_char) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes().to_vec();
    // SAFETY: allocated with calloc by lib/property_mosq.c and owned by us now.
    unsafe { free(p.cast()) };
    Some(bytes)
}

/// Mosquitto's property list as owned values; `None` if one cannot be read.
///
/// # Safety
/// `list` is NULL or a property list the broker owns for the duration of the call.
unsafe fn read_props(list: *const MosquittoProperty) -> Option<Vec<Prop>> {
    let mut out = Vec::new();
    let mut p = list;
    while !p.is_null() {
        if out.len() >= MAX_PROPERTIES {
            return None;
        }
        // SAFETY: `p` is a non-NULL element of the list (the caller's contract).
        let ident = unsafe { mosquitto_property_identifier(p) };
        let prop = match kind(ident)? {
            Kind::Byte => {
                let mut v = 0u8;
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself) and
                // `v` a local the call writes; a NULL return means nothing was read.
                let r = unsafe { mosquitto_property_read_byte(p, ident, &mut v, false) };
                (!r.is_null()).then_some(Prop::Byte(ident, v))?
            }
            Kind::Int16 => {
                let mut v = 0u16;
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself) and
                // `v` a local the call writes; a NULL return means nothing was read.
                let r = unsafe { mosquitto_property_read_int16(p, ident, &mut v, false) };
                (!r.is_null()).then_some(Prop::Int16(ident, v))?
            }
            Kind::Int32 => {
                let mut v = 0u32;
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself) and
                // `v` a local the call writes; a NULL return means nothing was read.
                let r = unsafe { mosquitto_property_read_int32(p, ident, &mut v, false) };
                (!r.is_null()).then_some(Prop::Int32(ident, v))?
            }
            Kind::Varint => {
                let mut v = 0u32;
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself) and
                // `v` a local the call writes; a NULL return means nothing was read.
                let r = unsafe { mosquitto_property_read_varint(p, ident, &mut v, false) };
                (!r.is_null()).then_some(Prop::Varint(ident, v))?
            }
            Kind::Binary => {
                let mut v: *mut c_void = ptr::null_mut();
                let mut len = 0u16;
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself);
                // `v` and `len` are locals the call writes (a calloc'd copy and its length).
                let r =
                    unsafe { mosquitto_property_read_binary(p, ident, &mut v, &mut len, false) };
                if r.is_null() || v.is_null() {
                    return None;
                }
                // SAFETY: `v` holds `len` bytes (calloc'd `len + 1`), freed right after.
                let bytes = unsafe { std::slice::from_raw_parts(v.cast::<u8>(), usize::from(len)) }
                    .to_vec();
                // SAFETY: calloc'd by lib/property_mosq.c, owned by us, not used after.
                unsafe { free(v) };
                Prop::Binary(ident, bytes)
            }
            Kind::String => {
                let mut v: *mut c_char = ptr::null_mut();
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself); `v`
                // is a local the call sets to a calloc'd copy (or leaves NULL).
                let r = unsafe { mosquitto_property_read_string(p, ident, &mut v, false) };
                // SAFETY: `v` is NULL or the calloc'd copy, ours to free.
                let value = unsafe { take_c_string(v) };
                if r.is_null() {
                    return None;
                }
                Prop::String(ident, value?)
            }
            Kind::StringPair => {
                let mut n: *mut c_char = ptr::null_mut();
                let mut v: *mut c_char = ptr::null_mut();
                // SAFETY: `p` is a valid element (`skip_first = false` reads `p` itself); `n`
                // and `v` are locals the call sets to calloc'd copies (or leaves NULL).
                let r =
                    unsafe { mosquitto_property_read_string_pair(p, ident, &mut n, &mut v, false) };
                // SAFETY: each is NULL or a calloc'd copy, ours to free.
                let (name, value) = unsafe { (take_c_string(n), take_c_string(v)) };
                if r.is_null() {
                    return None;
                }
                Prop::Pair(ident, name?, value?)
            }
        };
        out.push(prop);
        // SAFETY: `p` is a valid element; the next one or NULL.
        p = unsafe { mosquitto_property_next(p) };
    }
    Some(out)
}

/// A new Mosquitto property list holding `props` in order; `None` (nothing leaked) if one
/// cannot be added.
fn build_list(props: &[Prop]) -> Option<*mut MosquittoProperty> {
    let mut list: *mut MosquittoProperty = ptr::null_mut();
    for prop in props {
        let rc = add(&mut list, prop);
        if rc != Some(MOSQ_ERR_SUCCESS) {
            // SAFETY: `list` is NULL or a list built by mosquitto_property_add_*, ours.
            unsafe { mosquitto_property_free_all(&mut list) };
            return None;
        }
    }
    Some(list)
}

fn add(list: &mut *mut MosquittoProperty, prop: &Prop) -> Option<c_int> {
    Some(match prop {
        // SAFETY: `list` points at NULL or a list we build; the value is passed by copy.
        Prop::Byte(i, v) => unsafe { mosquitto_property_add_byte(list, *i, *v) },
        // SAFETY: as above.
        Prop::Int16(i, v) => unsafe { mosquitto_property_add_int16(list, *i, *v) },
        // SAFETY: as above.
        Prop::Int32(i, v) => unsafe { mosquitto_property_add_int32(list, *i, *v) },
        // SAFETY: as above.
        Prop::Varint(i, v) => unsafe { mosquitto_property_add_varint(list, *i, *v) },
        Prop::Binary(i, v) => {
            let len = u16::try_from(v.len()).ok()?;
            // SAFETY: `list` as above; `v` holds `len` bytes for the call (the broker copies
            // them).
            unsafe { mosquitto_property_add_binary(list, *i, v.as_ptr().cast(), len) }
        }
        Prop::String(i, v) => {
            let v = CString::new(v.as_slice()).ok()?;
            // SAFETY: `list` as above; `v` is NUL-terminated and outlives the call (copied).
            unsafe { mosquitto_property_add_string(list, *i, v.as_ptr()) }
        }
        Prop::Pair(i, n, v) => {
            let n = CString::new(n.as_slice()).ok()?;
            let v = CString::new(v.as_slice()).ok()?;
            // SAFETY: `list` as above; `n` and `v` are NUL-terminated and outlive the call
            // (copied).
            unsafe { mosquitto_property_add_string_pair(list, *i, n.as_ptr(), v.as_ptr()) }
        }
    })
}

impl State {
    /// Logs one drop or forgery, rate-limited.
    fn log_limited(&self, level: c_int, text: impl FnOnce() -> String) {
        let admit = match self.drops.lock() {
            Ok(mut d) => d.admit(now_s()),
            Err(_) => return,
        };
        if let Admit::Log { suppressed } = admit {
            let mut line = text();
            if suppressed > 0 {
                line.push_str(&format!(" ({suppressed} similar lines not logged)"));
            }
            log(level, &line);
        }
    }

    fn maybe_report(&self) {
        let due = self
            .clock
            .lock()
            .map(|mut c| c.due(now_s()))
            .unwrap_or(false);
        if due {
            log(MOSQ_LOG_NOTICE, &self.counters.line());
        }
    }

    /// The message event for one publish.
    fn on_message(&self, msg: &mut EvtMessage) -> c_int {
        self.maybe_report();
        // SAFETY: the broker's topic string, alive during the callback.
        let Some(topic) = (unsafe { borrowed_str(msg.topic) }) else {
            return MOSQ_ERR_SUCCESS;
        };
        if !is_request(&self.options.request_topics, topic) {
            return MOSQ_ERR_SUCCESS;
        }
        // SAFETY: `msg.client` is the publishing client, alive during the callback; the
        // strings it returns are the broker's, alive as long as the client.
        let client = unsafe {
            Client {
                client_id: borrowed_str(mosquitto_client_id(msg.client)),
                username: borrowed_str(mosquitto_client_username(msg.client)),
            }
        };
        let who = shorten(client.client_id.unwrap_or("?"), MAX_LOGGED_CHARS);
        // SAFETY: the broker's list for this message, alive during the callback.
        let Some(props) = (unsafe { read_props(msg.properties) }) else {
            Counters::bump(&self.counters.errors);
            self.log_limited(MOSQ_LOG_ERR, || {
                format!(
                    "statestore-plugin: dropped a request from client '{who}': its properties \
                     could not be read"
                )
            });
            return MOSQ_ERR_ACL_DENIED;
        };
        match decide(&self.options, topic, client, response_topic(&props)) {
            Verdict::NotARequest => MOSQ_ERR_SUCCESS,
            Verdict::Refuse(reason) => {
                let counter = match reason {
                    Refusal::NoIdentity => &self.counters.refused_no_identity,
                    Refusal::ResponseTopicOutside => &self.counters.refused_response_topic,
                };
                Counters::bump(counter);
                let rt = response_topic(&props).map(|r| shorten_bytes(r, MAX_LOGGED_CHARS));
                self.log_limited(MOSQ_LOG_WARNING, || {
                    format!(
                        "statestore-plugin: dropped a request from client '{who}' to '{}': {} \
                         (response topic '{}')",
                        shorten(topic, MAX_LOGGED_CHARS),
                        reason.as_str(),
                        rt.as_deref().unwrap_or("")
                    )
                });
                MOSQ_ERR_ACL_DENIED
            }
            Verdict::Vouch(identity) => {
                let (new_props, removed) = vouch(props, &self.options.property, identity);
                let Some(list) = build_list(&new_props) else {
                    Counters::bump(&self.counters.errors);
                    self.log_limited(MOSQ_LOG_ERR, || {
                        format!(
                            "statestore-plugin: dropped a request from client '{who}': its \
                             properties could not be rewritten"
                        )
                    });
                    return MOSQ_ERR_ACL_DENIED;
                };
                let mut old = std::mem::replace(&mut msg.properties, list);
                // SAFETY: the old list is the broker's, replaced above and referenced nowhere
                // else (src/plugin.c stores the new pointer and does not free the old one).
                unsafe { mosquitto_property_free_all(&mut old) };
                Counters::bump(&self.counters.vouched);
                if removed > 0 {
                    Counters::add(&self.counters.forged_removed, removed as u64);
                    let name = &self.options.property;
                    self.log_limited(MOSQ_LOG_NOTICE, || {
                        format!(
                            "statestore-plugin: removed {removed} client-supplied {name} from \
                             a request of client '{who}'"
                        )
                    });
                }
                MOSQ_ERR_SUCCESS
            }
        }
    }
}

unsafe extern "C" fn on_message(
    event: c_int,
    event_data: *mut c_void,
    userdata: *mut c_void,
) -> c_int {
    if event != MOSQ_EVT_MESSAGE || event_data.is_null() || userdata.is_null() {
        return MOSQ_ERR_SUCCESS;
    }
    // SAFETY: `userdata` is the `State` registered with this callback, alive until cleanup
    // unregisters it; only shared references are made.
    let state = unsafe { &*userdata.cast::<State>() };
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: for MOSQ_EVT_MESSAGE the broker passes its `struct mosquitto_evt_message`,
        // exclusively ours during the callback.
        let msg = unsafe { &mut *event_data.cast::<EvtMessage>() };
        state.on_message(msg)
    }));
    result.unwrap_or_else(|_| {
        Counters::bump(&state.counters.errors);
        log(
            MOSQ_LOG_ERR,
            "statestore-plugin: internal error (panic) on a request: dropped",
        );
        MOSQ_ERR_ACL_DENIED
    })
}

/// Version negotiation: this plugin speaks version 5 only.
///
/// # Safety
/// Called by Mosquitto with `supported_versions` holding `supported_version_count` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_version(
    supported_version_count: c_int,
    supported_versions: *const c_int,
) -> c_int {
    catch_unwind(|| {
        let count = usize::try_from(supported_version_count)
            .unwrap_or(0)
            .min(64);
        if supported_versions.is_null() {
            return -1;
        }
        // SAFETY: the broker passes an array of `supported_version_count` ints.
        let versions = unsafe { std::slice::from_raw_parts(supported_versions, count) };
        if versions.contains(&MOSQ_PLUGIN_VERSION) {
            MOSQ_PLUGIN_VERSION
        } else {
            -1
        }
    })
    .unwrap_or(-1)
}

/// Load: parses the options, registers the message callback.
///
/// # Safety
/// Called by Mosquitto with valid `identifier` and `userdata` pointers and `options` holding
/// `option_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_init(
    identifier: *mut PluginId,
    userdata: *mut *mut c_void,
    options: *mut MosquittoOpt,
    option_count: c_int,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        if userdata.is_null() {
            return MOSQ_ERR_INVAL;
        }
        let count = usize::try_from(option_count).unwrap_or(0);
        if count > MAX_OPTIONS {
            log(
                MOSQ_LOG_ERR,
                &format!("statestore-plugin: {count} options, at most {MAX_OPTIONS}"),
            );
            return MOSQ_ERR_INVAL;
        }
        let raw: &[MosquittoOpt] = if options.is_null() || count == 0 {
            &[]
        } else {
            // SAFETY: the broker passes `option_count` options.
            unsafe { std::slice::from_raw_parts(options, count) }
        };
        let mut pairs = Vec::with_capacity(raw.len());
        for o in raw {
            // SAFETY: the broker's option strings, alive during the call.
            let (Some(k), Some(v)) = (unsafe { borrowed_str(o.key) }, unsafe {
                borrowed_str(o.value)
            }) else {
                log(MOSQ_LOG_ERR, "statestore-plugin: an option is not UTF-8");
                return MOSQ_ERR_INVAL;
            };
            pairs.push((k, v));
        }
        let options = match Options::parse(&pairs) {
            Ok(o) => o,
            Err(e) => {
                log(MOSQ_LOG_ERR, &format!("statestore-plugin: {e}"));
                return MOSQ_ERR_INVAL;
            }
        };
        let report_interval_s = options.report_interval_s;
        log(
            MOSQ_LOG_INFO,
            &format!("statestore-plugin: loaded: {}", options.describe()),
        );
        let state = Box::new(State {
            identifier,
            options,
            counters: Counters::default(),
            drops: Mutex::new(DropLog::default()),
            clock: Mutex::new(ReportClock::new(report_interval_s)),
        });
        let state = Box::into_raw(state);
        // SAFETY: `identifier` is the broker's for this plugin; `state` lives until cleanup.
        let rc = unsafe {
            mosquitto_callback_register(
                identifier,
                MOSQ_EVT_MESSAGE,
                on_message,
                ptr::null(),
                state.cast(),
            )
        };
        if rc != MOSQ_ERR_SUCCESS {
            // SAFETY: not registered, so not shared: reclaimed once.
            drop(unsafe { Box::from_raw(state) });
            log(
                MOSQ_LOG_ERR,
                &format!("statestore-plugin: registering the message callback failed ({rc})"),
            );
            return rc;
        }
        // SAFETY: `userdata` is the broker's out-pointer (checked non-NULL).
        unsafe { *userdata = state.cast() };
        MOSQ_ERR_SUCCESS
    }))
    .unwrap_or(MOSQ_ERR_UNKNOWN)
}

/// Unload: unregisters the callback, logs the counters, frees the state.
///
/// # Safety
/// Called by Mosquitto once, with the `userdata` init set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_cleanup(
    userdata: *mut c_void,
    _options: *mut MosquittoOpt,
    _option_count: c_int,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        if userdata.is_null() {
            return MOSQ_ERR_SUCCESS;
        }
        let state = userdata.cast::<State>();
        // SAFETY: `state` is the Box init leaked; the callback is unregistered before it is
        // freed, so no callback can see it afterwards.
        unsafe {
            mosquitto_callback_unregister(
                (*state).identifier,
                MOSQ_EVT_MESSAGE,
                on_message,
                ptr::null(),
            );
            log(MOSQ_LOG_NOTICE, &(*state).counters.line());
            drop(Box::from_raw(state));
        }
        MOSQ_ERR_SUCCESS
    }))
    .unwrap_or(MOSQ_ERR_UNKNOWN)
}
