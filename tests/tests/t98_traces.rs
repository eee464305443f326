//! Traces end to end: a real node exports OTLP/gRPC spans to a collector in the test. A request
//! carrying a sampled W3C `traceparent` user property continues that trace through every stage
//! (request → validate → propose → commit → raft.append / raft.fsync / raft.apply → reply, and
//! notify for the KEYNOTIFY observers it triggers), with command and result attributes; with a
//! sample ratio of 0, requests without a sampled `traceparent` export nothing.

use std::time::Duration;

use statestore_tests::devicebound::dcall_with;
use statestore_tests::otlp::{Collector, Span};
use statestore_tests::raw::resp;
use statestore_tests::raw_helpers::*;

/// A sampled W3C trace context with `trace` (32 hex digits) and parent span `span` (16).
fn traceparent(trace: &str, span: &str, sampled: bool) -> String {
    format!("00-{trace}-{span}-{}", if sampled { "01" } else { "00" })
}

fn in_trace<'a>(spans: &'a [Span], trace: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.trace_id == trace).collect()
}

/// The one span named `name` whose parent is `parent`, failing with the trace's spans.
fn child<'a>(trace: &[&'a Span], parent: &Span, name: &str) -> &'a Span {
    let found: Vec<&&Span> = trace
        .iter()
        .filter(|s| s.name == name && s.parent_span_id == parent.span_id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one `{name}` under `{}` expected; trace: {:#?}",
        parent.name,
        summary(trace)
    );
    found[0]
}

fn summary(trace: &[&Span]) -> Vec<String> {
    trace
        .iter()
        .map(|s| {
            format!(
                "{} id={} parent={} {:?}",
                s.name, s.span_id, s.parent_span_id, s.attributes
            )
        })
        .collect()
}

/// `inner` starts and ends within `outer`.
fn assert_within(inner: &Span, outer: &Span) {
    assert!(
        inner.start_ns >= outer.start_ns && inner.end_ns <= outer.end_ns,
        "`{}` [{}, {}] not within `{}` [{}, {}]",
        inner.name,
        inner.start_ns,
        inner.end_ns,
        outer.name,
        outer.start_ns,
        outer.end_ns
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_request_continues_its_traceparent_through_every_stage() {
    let collector = Collector::start();
    let endpoint = collector.endpoint();
    let (broker, mut node) =
        start_single(&["--otlp-endpoint", &endpoint, "--trace-sample-ratio", "0"]).await;

    // An observer of the key (its KEYNOTIFY carries no traceparent: not traced at ratio 0).
    let mut observer = connect(&broker, "t98-observer").await;
    observer
        .subscribe(&notify_topic("t98-observer", b"traced"))
        .await;
    assert_payload(
        "KEYNOTIFY",
        &cmd(&mut observer, "KEYNOTIFY", &[b"KEYNOTIFY", b"traced"]).await,
        b"+OK\r\n",
    );

    let mut client = connect(&broker, "t98-client").await;
    let set_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let remote_parent = "00f067aa0ba902b7";
    let mut p = props(&mut client);
    set_user(
        &mut p,
        "traceparent",
        &traceparent(set_trace, remote_parent, true),
    );
    set_user(&mut p, "tracestate", "vendor=value");
    let reply = call(
        &mut client,
        "traced SET",
        &resp(&[b"SET", b"traced", b"v1"]),
        p,
    )
    .await;
    assert_payload("traced SET", &reply, b"+OK\r\n");
    let notification = observer
        .next(REPLY_WAIT)
        .await
        .expect("the observer is notified of the traced SET");
    assert_eq!(notification.payload.as_ref(), notify_set(b"v1").as_slice());

    let get_trace = "0af7651916cd43dd8448eb211c80319c";
    let mut p = props(&mut client);
    set_user(
        &mut p,
        "traceparent",
        &traceparent(get_trace, "b7ad6b7169203331", true),
    );
    let reply = call(&mut client, "traced GET", &resp(&[b"GET", b"traced"]), p).await;
    assert_payload("traced GET", &reply, &bulk(b"v1"));

    let unsampled_trace = "11111111111111111111111111111111";
    let mut p = props(&mut client);
    set_user(
        &mut p,
        "traceparent",
        &traceparent(unsampled_trace, "2222222222222222", false),
    );
    let reply = call(
        &mut client,
        "unsampled SET",
        &resp(&[b"SET", b"traced", b"v2"]),
        p,
    )
    .await;
    assert_payload("unsampled SET", &reply, b"+OK\r\n");

    let refused_trace = "33333333333333333333333333333333";
    let mut p = props(&mut client);
    set_user(
        &mut p,
        "traceparent",
        &traceparent(refused_trace, "4444444444444444", true),
    );
    let reply = call(&mut client, "malformed", &resp(&[b"SET", b"only-key"]), p).await;
    assert!(
        reply.payload.starts_with(b"-ERR"),
        "SET without a value is refused"
    );

    let send_trace = "55555555555555555555555555555555";
    let send_parent = traceparent(send_trace, "6666666666666666", true);
    let reply = dcall_with(
        &mut client,
        "traced SEND",
        &[b"SEND", b"t98-device", b"m1", b"hello"],
        &[("traceparent", send_parent.as_str())],
    )
    .await;
    assert_eq!(reply.payload.as_ref(), b"+OK\r\n");

    // A graceful stop flushes the exporter: every finished span has arrived when it exits.
    let status = tokio::task::block_in_place(|| node.terminate(Duration::from_secs(30)));
    assert!(
        status.is_some_and(|s| s.success()),
        "node stopped cleanly: {}",
        node.log_tail(30)
    );
    let spans = collector.spans();

    // The SET: its root continues the remote parent, every stage hangs where it belongs.
    let set = in_trace(&spans, set_trace);
    let request = set
        .iter()
        .find(|s| s.name == "request")
        .unwrap_or_else(|| panic!("a `request` span in the SET's trace; got {spans:#?}"));
    assert_eq!(request.parent_span_id, remote_parent);
    assert_eq!(request.service, "statestore");
    assert_eq!(request.attribute("command"), Some("set"));
    assert_eq!(request.attribute("result"), Some("ok"));
    assert_eq!(request.attribute("service"), Some("statestore"));
    let validate = set
        .iter()
        .filter(|s| s.name == "validate" && s.parent_span_id == request.span_id)
        .count();
    assert_eq!(
        validate,
        2,
        "parse and the checks at the door: {:#?}",
        summary(&set)
    );
    let propose = child(&set, request, "propose");
    assert_eq!(propose.attribute("mutation"), Some("set"));
    let commit = child(&set, propose, "commit");
    let append = child(&set, commit, "raft.append");
    let fsync = child(&set, commit, "raft.fsync");
    let apply = child(&set, commit, "raft.apply");
    let reply = child(&set, request, "reply");
    let notify = child(&set, commit, "notify");
    assert_eq!(notify.attribute("observers"), Some("1"));
    assert_eq!(notify.attribute("op"), Some("set"));
    assert_within(propose, request);
    assert_within(commit, propose);
    assert_within(reply, request);
    for stage in [append, fsync, apply] {
        assert_within(stage, commit);
    }
    assert!(append.start_ns <= fsync.start_ns && fsync.end_ns <= apply.start_ns);
    assert!(
        set.iter()
            .all(|s| s.span_id == request.span_id
                || set.iter().any(|p| p.span_id == s.parent_span_id)),
        "every span of the trace has its parent in it: {:#?}",
        summary(&set)
    );

    // The GET: a linearizable read, no proposal.
    let get = in_trace(&spans, get_trace);
    let request = get
        .iter()
        .find(|s| s.name == "request")
        .expect("a `request` span in the GET's trace");
    assert_eq!(request.attribute("command"), Some("get"));
    assert_eq!(request.attribute("result"), Some("ok"));
    child(&get, request, "read");
    assert!(get.iter().all(|s| s.name != "propose"));

    // Refused at the door: traced with its error result, nothing proposed.
    let refused = in_trace(&spans, refused_trace);
    let request = refused
        .iter()
        .find(|s| s.name == "request")
        .expect("a `request` span for the refused SET");
    assert_eq!(request.attribute("command"), Some("set"));
    assert_ne!(request.attribute("result"), Some("ok"));
    assert!(refused.iter().all(|s| s.name != "propose"));

    // The device-bound service is traced the same way.
    let send = in_trace(&spans, send_trace);
    let request = send
        .iter()
        .find(|s| s.name == "request")
        .expect("a `request` span in the SEND's trace");
    assert_eq!(request.attribute("service"), Some("devicebound"));
    assert_eq!(request.attribute("command"), Some("send"));
    assert_eq!(request.attribute("result"), Some("ok"));
    let propose = child(&send, request, "propose");
    let commit = child(&send, propose, "commit");
    child(&send, commit, "raft.fsync");

    // Not sampled: the caller's decision is kept, and ratio 0 traces nothing else.
    assert!(in_trace(&spans, unsampled_trace).is_empty());
    assert!(
        spans
            .iter()
            .all(|s| s.attribute("command") != Some("keynotify")),
        "the untraced KEYNOTIFY exported nothing"
    );
    let traces: std::collections::BTreeSet<&str> =
        spans.iter().map(|s| s.trace_id.as_str()).collect();
    assert!(
        traces
            .iter()
            .all(|t| [set_trace, get_trace, refused_trace, send_trace].contains(t)),
        "only the sampled requests' traces were exported: {traces:?}"
    );
}
