//! Issue 29 end to end: a real Mosquitto loads the statestore plugin built by this build; a node
//! runs with `--auth-identity broker` and the policy in `testdata/authorization/policy.toml`.
//! Users alice and bob log in with passwords, carol with a client certificate (its CN is her
//! user name). The official SDK gets `not authorized` for what the policy denies and works for
//! what it allows; a raw client that forges the vouched property or another's `__srcId` is
//! still itself (also for KEYNOTIFY routing); a changed policy file applies without a restart;
//! a node told to trust the broker answers nothing a broker without the plugin passes on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use azure_iot_operations_services::state_store::{self, ErrorKind, ServiceError, SetOptions};
use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::pki::{CertFiles, Pki};
use statestore_tests::plugin::broker_with_plugin;
use statestore_tests::raw::{RawClient, resp};
use statestore_tests::raw_helpers::{cmd, props, set_user};
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::sdk_helpers::notify_topic;
use statestore_tests::wait_for;

const READY: Duration = Duration::from_secs(30);

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/authorization")
        .join(name)
}

/// The broker (plugin, password users, a TLS listener for certificate users), one node enforcing
/// the policy file, and the certificates.
struct Secured {
    broker: Broker,
    node: StatestoreNode,
    policy: PathBuf,
    tls_port: u16,
    ca: PathBuf,
    carol: CertFiles,
    _pki: Pki,
    _dir: tempfile::TempDir,
}

async fn secured() -> Secured {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let server = pki.leaf("ca", "broker", "IP:127.0.0.1");
    let carol = pki.leaf("ca", "carol", "DNS:carol");
    let tls_port = statestore_tests::free_port();
    let listener = format!(
        "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n\
         require_certificate true\nuse_identity_as_username true\n",
        ca.display(),
        server.cert.display(),
        server.key.display()
    );
    let broker = broker_with_plugin(
        dir.path(),
        &[("alice", "pw-a"), ("bob", "pw-b")],
        &["check_response_topic true"],
        &listener,
    );
    let policy = dir.path().join("policy.toml");
    std::fs::copy(testdata("policy.toml"), &policy).expect("copy policy");
    let node = StatestoreNode::start(
        &broker,
        NodeSpec {
            extra_args: [
                "--auth-identity",
                "broker",
                "--auth-policy-file",
                &policy.display().to_string(),
                "--auth-policy-reload-interval-ms",
                "100",
            ]
            .map(String::from)
            .to_vec(),
            ..NodeSpec::default()
        },
    );
    node.wait_ready(READY).await;
    Secured {
        broker,
        node,
        policy,
        tls_port,
        ca,
        carol,
        _pki: pki,
        _dir: dir,
    }
}

impl Secured {
    /// An SDK client logged in as `user` (its client id is the user name, so notifications
    /// routed by the vouched identity reach it).
    async fn password_user(&self, user: &str, password: &str) -> SdkClient {
        let port = self.broker.port;
        SdkClient::connect_with(user, |settings| {
            settings
                .tcp_port(port)
                .use_tls(false)
                .username(user.to_owned())
                .password(password.to_owned())
        })
        .await
    }

    /// An SDK client that logs in with carol's certificate.
    async fn certificate_user(&self) -> SdkClient {
        let (port, ca, cert, key) = (
            self.tls_port,
            self.ca.display().to_string(),
            self.carol.cert.display().to_string(),
            self.carol.key.display().to_string(),
        );
        SdkClient::connect_with("carol", |settings| {
            settings
                .tcp_port(port)
                .use_tls(true)
                .ca_file(ca)
                .cert_file(cert)
                .key_file(key)
        })
        .await
    }

    async fn reloads(&self, result: &str) -> f64 {
        self.node
            .metric(&format!(
                "statestore_auth_policy_reloads_total{{result=\"{result}\"}}"
            ))
            .await
            .unwrap_or(0.0)
    }
}

/// Waits until `client`'s GET of `key` is answered (allowed or not): the node leads and serves.
async fn wait_answered(client: &state_store::Client, key: &[u8]) {
    let answered = wait_for(READY, || async {
        match client.get(key.to_vec(), Duration::from_secs(2)).await {
            Ok(_) => Some(()),
            Err(err) if matches!(err.kind(), ErrorKind::ServiceError(_)) => Some(()),
            Err(_) => None,
        }
    })
    .await;
    assert!(answered.is_some(), "no answer to a GET within {READY:?}");
}

fn is_not_authorized<T: std::fmt::Debug>(
    result: Result<state_store::Response<T>, state_store::Error>,
) -> bool {
    match result {
        Err(err) => matches!(
            err.kind(),
            ErrorKind::ServiceError(ServiceError::NotAuthorized)
        ),
        Ok(response) => panic!("expected not authorized, got {response:?}"),
    }
}

async fn set(client: &state_store::Client, key: &[u8], value: &[u8]) -> bool {
    client
        .set(
            key.to_vec(),
            value.to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("SET allowed")
        .response
}

async fn denied_set(client: &state_store::Client, key: &[u8]) -> bool {
    is_not_authorized(
        client
            .set(
                key.to_vec(),
                b"x".to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await,
    )
}

async fn denied_get(client: &state_store::Client, key: &[u8]) -> bool {
    is_not_authorized(client.get(key.to_vec(), TIMEOUT).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_is_refused_what_the_policy_denies_and_served_what_it_allows() {
    let env = secured().await;
    let alice = env.password_user("alice", "pw-a").await;
    let bob = env.password_user("bob", "pw-b").await;
    let carol = env.certificate_user().await;
    wait_answered(&alice.client, b"alice/1").await;

    // alice: her own keys and the shared ones.
    assert!(set(&alice.client, b"alice/1", b"a1").await);
    let got = alice.client.get(b"alice/1".to_vec(), TIMEOUT).await;
    assert_eq!(got.expect("GET allowed").response, Some(b"a1".to_vec()));
    assert!(set(&alice.client, b"shared/1", b"s1").await);
    assert!(denied_set(&alice.client, b"carol-key").await);
    // DEL is a write: bob may not, alice may.
    assert!(is_not_authorized(
        bob.client.del(b"shared/1".to_vec(), None, TIMEOUT).await
    ));

    // bob: reads shared/*, nothing else.
    let got = bob.client.get(b"shared/1".to_vec(), TIMEOUT).await;
    assert_eq!(got.expect("GET allowed").response, Some(b"s1".to_vec()));
    assert!(denied_set(&bob.client, b"shared/1").await);
    assert!(denied_get(&bob.client, b"alice/1").await);
    assert!(denied_set(&bob.client, b"alice/1").await);

    // carol (certificate CN): exactly her key.
    assert!(set(&carol.client, b"carol-key", b"c").await);
    assert!(denied_get(&carol.client, b"alice/1").await);
    assert!(denied_set(&carol.client, b"carol-key2").await);

    // A KEYNOTIFY is a read: bob may watch shared/*, and is told of alice's change.
    let mut observation = bob
        .client
        .observe(b"shared/1".to_vec(), TIMEOUT)
        .await
        .expect("KEYNOTIFY allowed")
        .response;
    assert!(is_not_authorized(
        bob.client.observe(b"alice/1".to_vec(), TIMEOUT).await
    ));
    assert!(set(&alice.client, b"shared/1", b"s2").await);
    let notified = tokio::time::timeout(TIMEOUT, observation.recv_notification())
        .await
        .expect("bob is notified in time")
        .expect("observation open");
    assert_eq!(notified.0.key, b"shared/1".to_vec());

    // Nothing denied changed anything.
    let got = alice.client.get(b"alice/1".to_vec(), TIMEOUT).await;
    assert_eq!(got.expect("GET allowed").response, Some(b"a1".to_vec()));
    let denied = env
        .node
        .metric("statestore_server_requests_total{command=\"set\",result=\"not_authorized\"}")
        .await;
    assert_eq!(
        denied,
        Some(4.0),
        "alice's SET carol-key, bob's two, carol's carol-key2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_identity_is_replaced_by_the_one_the_broker_vouches_for() {
    let env = secured().await;
    let alice = env.password_user("alice", "pw-a").await;
    wait_answered(&alice.client, b"alice/1").await;
    assert!(set(&alice.client, b"alice/1", b"a1").await);

    // bob claims to be alice every way a client can.
    let mut bob = RawClient::connect_as(env.broker.port, "bob", Some(("bob", "pw-b"))).await;
    let mut forged = props(&mut bob);
    set_user(&mut forged, "__srcId", "alice");
    set_user(&mut forged, "__ssVouchedId", "alice");
    let reply = bob
        .request_with(&resp(&[b"SET", b"alice/1", b"x"]), forged, TIMEOUT)
        .await
        .expect("answered");
    assert_eq!(&reply.payload[..], b"-ERR not authorized\r\n");

    // KEYNOTIFY routes by the vouched identity: bob's registration claiming alice's __srcId
    // notifies bob's topic. Two keys, changed in order: the notifier publishes events in
    // order, so once the second key's notification is in, the first one's all are.
    bob.subscribe("clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/#")
        .await;
    for key in [&b"shared/n1"[..], b"shared/n2"] {
        let mut claims_alice = props(&mut bob);
        set_user(&mut claims_alice, "__srcId", "alice");
        let reply = bob
            .request_with(&resp(&[b"KEYNOTIFY", key]), claims_alice, TIMEOUT)
            .await
            .expect("answered");
        assert_eq!(&reply.payload[..], b"+OK\r\n");
    }
    assert!(set(&alice.client, b"shared/n1", b"1").await);
    assert!(set(&alice.client, b"shared/n2", b"2").await);
    let mut topics = Vec::new();
    let last = notify_topic("bob", b"shared/n2");
    while topics.last() != Some(&last) {
        let received = bob.next(TIMEOUT).await.expect("notification in time");
        if received.topic.contains("/command/notify/") {
            topics.push(received.topic);
        }
    }
    assert_eq!(topics, vec![notify_topic("bob", b"shared/n1"), last]);
    // The plain way still works alongside: a command as bob, bob's own rights.
    let reply = cmd(&mut bob, "GET shared/n1", &[b"GET", b"shared/n1"]).await;
    assert_eq!(&reply.payload[..], b"$1\r\n1\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_file_applies_without_a_restart_and_a_bad_one_is_refused() {
    let env = secured().await;
    let bob = env.password_user("bob", "pw-b").await;
    wait_answered(&bob.client, b"shared/1").await;
    assert!(denied_set(&bob.client, b"shared/1").await);

    std::fs::copy(testdata("policy-bob-writes.toml"), &env.policy).expect("new policy");
    let reloaded = wait_for(READY, || async {
        (env.reloads("ok").await >= 1.0).then_some(())
    });
    assert!(
        reloaded.await.is_some(),
        "the node never reloaded the policy"
    );
    assert!(set(&bob.client, b"shared/1", b"b").await);

    std::fs::copy(testdata("policy-invalid.toml"), &env.policy).expect("bad policy");
    let refused = wait_for(READY, || async {
        (env.reloads("error").await >= 1.0).then_some(())
    });
    assert!(
        refused.await.is_some(),
        "the node never looked at the bad policy"
    );
    assert!(
        set(&bob.client, b"shared/2", b"b").await,
        "the last good rules stay"
    );
    assert!(denied_get(&bob.client, b"alice/1").await);
    assert!(env.node.is_ready().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_trusts_the_broker_answers_nothing_a_plain_broker_passes_on() {
    let broker = Broker::start();
    let node = StatestoreNode::start(
        &broker,
        NodeSpec {
            extra_args: ["--auth-identity", "broker"].map(String::from).to_vec(),
            ..NodeSpec::default()
        },
    );
    node.wait_ready(READY).await;
    // A well-formed request without the property (the plugin is not loaded): no reply. (A
    // client could set the property itself here, and nothing would remove it: the reason the
    // node must be told to trust the broker only where the plugin runs on every path.)
    let mut client = RawClient::connect(broker.port, "plain").await;
    let reply = client.request(&resp(&[b"GET", b"k"])).await;
    assert!(reply.is_none(), "answered {reply:?}");
    let dropped = wait_for(READY, || async {
        node.metric("statestore_server_requests_dropped_total{reason=\"no_vouched_identity\"}")
            .await
            .filter(|count| *count >= 1.0)
    })
    .await;
    assert_eq!(dropped, Some(1.0));
}

/// `statestore policy check FILE`: exit 0 with the rule count for a valid file (the README's
/// copy-paste policy among them), exit 1 naming the fault for an invalid one.
#[test]
fn policy_check_accepts_the_readme_policy_and_names_what_is_wrong() {
    let check = |file: &Path| {
        std::process::Command::new(statestore_tests::node::statestore_bin())
            .args(["policy", "check"])
            .arg(file)
            .output()
            .expect("run statestore policy check")
    };
    let out = check(&testdata("policy.toml"));
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("valid, 4 rules"),
        "{out:?}"
    );

    let out = check(&testdata("policy-invalid.toml"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nobody-defined-this"), "{stderr}");

    // The README's example, exactly as a user would copy it.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let start = readme
        .find("```toml\n# /etc/statestore/policy.toml\n")
        .expect("the README's policy example");
    let body = &readme[start + "```toml\n".len()..];
    let example = &body[..body.find("```").expect("end of the example")];
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, example).expect("write the example");
    let out = check(&file);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("valid, 5 rules"),
        "{out:?}"
    );
}
