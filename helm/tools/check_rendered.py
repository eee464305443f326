#!/usr/bin/env python3
"""Assertions over the statestore chart's rendered manifests (`helm template`), and renders
that must fail with a clear message.

    check_rendered.py HELM REPO_ROOT

Each check prints PASS/FAIL with what it compared; exits 1 if any failed. Needs PyYAML (the
tools venv of scripts/check-helm.sh) and Python 3.11 (tomllib).
"""

import base64
import copy
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml

sys.dont_write_bytecode = True  # no __pycache__ next to fake_apiserver.py in the repository
from fake_apiserver import FakeApiServer  # noqa: E402

HELM = sys.argv[1]
ROOT = Path(sys.argv[2]).resolve()
CHART = ROOT / "helm" / "statestore"
RELEASE, NS, DOMAIN = "demo", "store", "cluster.local"

failures = 0
passes = 0


def check(ok, what):
    global failures, passes
    if ok:
        passes += 1
        print(f"PASS {what}")
    else:
        failures += 1
        print(f"FAIL {what}")
    return ok


def helm_template(*args):
    cmd = [HELM, "template", RELEASE, str(CHART), "-n", NS, *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def render(*args):
    out = helm_template(*args)
    if out.returncode != 0:
        raise SystemExit(f"helm template {' '.join(args)} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


class Manifests:
    def __init__(self, docs):
        self.docs = docs

    def all(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind, name=None):
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        if len(found) != 1:
            raise SystemExit(f"expected one {kind} {name or ''}, found {len(found)}")
        return found[0]

    def maybe(self, kind, name):
        found = [d for d in self.all(kind) if d["metadata"]["name"] == name]
        return found[0] if found else None

    def jobs(self, what):
        """The membership Jobs of revision 1: what is "join" or "remove"."""
        return [d for d in self.all("Job") if d["metadata"]["name"].endswith(f"-{what}-r1")]


def hook_events(job):
    return set(job["metadata"].get("annotations", {}).get("helm.sh/hook", "").split(","))


def removed_ids(job):
    return [c["args"][-1] for c in job["spec"]["template"]["spec"]["initContainers"]]


def flags(args):
    """`--flag value` pairs of a container's args (after the subcommand)."""
    out = {}
    i = 1
    while i < len(args):
        if args[i].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            i += 1
    return out


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


def named_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p["name"] == port:
            return p["containerPort"]
    raise SystemExit(f"no port named {port} in container {container['name']}")


def restrictive(where, pod_spec):
    psc = pod_spec.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, f"{where}: pod runAsNonRoot")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: seccomp RuntimeDefault")
    check(pod_spec.get("automountServiceAccountToken") is False, f"{where}: no service account token")
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        sc = c.get("securityContext", {})
        check(
            sc.get("readOnlyRootFilesystem") is True
            and sc.get("allowPrivilegeEscalation") is False
            and sc.get("capabilities", {}).get("drop") == ["ALL"],
            f"{where}/{c['name']}: read-only root, no privilege escalation, capabilities dropped",
        )


def node_configs(m, sts):
    cm = m.one("ConfigMap", f"{sts['metadata']['name']}-config")
    return {k: tomllib.loads(v) for k, v in cm["data"].items()}, cm


def default_render():
    print("== default values")
    m = Manifests(render())
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    f = flags(container["args"])
    headless = m.one("Service", spec["serviceName"])
    admin = m.one("Service", name)

    check(spec["replicas"] == 3, "replicas 3")
    check(spec["podManagementPolicy"] == "Parallel", "podManagementPolicy Parallel")
    check(headless["spec"].get("clusterIP") == "None", "headless Service has clusterIP None")
    check(headless["spec"].get("publishNotReadyAddresses") is True, "headless Service publishes not-ready addresses")
    pod_labels = spec["template"]["metadata"]["labels"]
    for svc in (headless, admin):
        check(
            svc["spec"]["selector"].items() <= pod_labels.items(),
            f"Service {svc['metadata']['name']} selects the pods",
        )
    check(spec["selector"]["matchLabels"].items() <= pod_labels.items(), "StatefulSet selector matches its pods")
    check(container["args"][0] == "run", "container runs `statestore run` (entrypoint statestore)")

    # Ports: flags, container ports, Services, probes, peers, NetworkPolicy.
    http_host, http_port = host_port(f["--http"])
    raft_host, raft_port = host_port(f["--raft"])
    check(http_host == raft_host == "0.0.0.0", "listeners on all interfaces")
    check(named_port(container, "http") == http_port, f"container port http = --http port {http_port}")
    check(named_port(container, "raft") == raft_port, f"container port raft = --raft port {raft_port}")
    for svc in (headless, admin):
        for p in svc["spec"]["ports"]:
            want = {"http": http_port, "raft": raft_port}[p["name"]]
            check(
                p["port"] == want and named_port(container, p["targetPort"]) == want,
                f"Service {svc['metadata']['name']} port {p['name']} = {want}",
            )
    for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        check(
            get["path"] == path and named_port(container, get["port"]) == http_port,
            f"{probe} GET {path} on the --http port",
        )
    check(all(container[p]["httpGet"].get("scheme") == "HTTPS" for p in ("startupProbe", "livenessProbe", "readinessProbe")), "probes use HTTPS by default (tls.http on)")
    startup = container["startupProbe"]
    check(startup["periodSeconds"] * startup["failureThreshold"] >= 300, "startup probe allows >= 5 min of catch-up")

    # Peers: one file per pod, id = ordinal + 1, the peer list = the pods' DNS names.
    configs, cm = node_configs(m, sts)
    check(sorted(configs) == [f"{name}-{i}.toml" for i in range(3)], "one TOML file per pod")
    mount = {vm["name"]: vm["mountPath"] for vm in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_vol = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    check(f["--config"] == f"{mount[config_vol]}/$(POD_NAME).toml", "--config is the pod's own file")
    env = {e["name"]: e for e in container["env"]}
    check(
        env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name",
        "POD_NAME comes from the pod's name",
    )
    dns = [f"{name}-{i}.{headless['metadata']['name']}.{NS}.svc.{DOMAIN}:{raft_port}" for i in range(3)]
    for i in range(3):
        c = configs[f"{name}-{i}.toml"]
        check(c["id"] == i + 1, f"pod {i}: node id {i + 1}")
        check(c["cluster"].get("peers") == {str(j + 1): dns[j] for j in range(3)}, f"pod {i}: peers are the pods' DNS names")
        check("join" not in c["cluster"], f"pod {i}: bootstraps (no join)")
        advertise = f["--advertise"].replace("$(POD_NAME)", f"{name}-{i}")
        check(advertise == c["cluster"]["peers"][str(i + 1)], f"pod {i}: --advertise = its own peer entry {advertise}")
        check(c["mqtt"]["username"] == f"statestore-node-{i + 1}", f"pod {i}: MQTT user statestore-node-{i + 1}")
    data_mount = mount["data"]
    check(f["--data-dir"] == data_mount, "--data-dir is the data volume")
    check([t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"], "one PVC template per pod")
    check("data" not in volumes, "data comes from the PVC template, not a pod volume")

    # Broker: address, password file, users and ACL.
    mqtt_svc = m.one("Service", f"{RELEASE}-mqtt")
    (mqtt_port,) = mqtt_svc["spec"]["ports"]
    check(
        f["--broker"] == f"{RELEASE}-mqtt.{NS}.svc.{DOMAIN}:{mqtt_port['port']}",
        f"--broker is the bundled Mosquitto Service ({f['--broker']})",
    )
    broker = m.one("Deployment", f"{RELEASE}-mqtt")
    bpod = broker["spec"]["template"]["spec"]
    (bcontainer,) = bpod["containers"]
    check(named_port(bcontainer, mqtt_port["targetPort"]) == 1883, "broker Service targets the listener port")
    check(mqtt_svc["spec"]["selector"].items() <= broker["spec"]["template"]["metadata"]["labels"].items(), "broker Service selects the broker")
    pw_dir = f["--mqtt-password-file"].rsplit("/", 1)[0]
    pw_vol = next(n for n, p in mount.items() if p == pw_dir)
    secret_ref = volumes[pw_vol]["secret"]
    secret = m.one("Secret", secret_ref["secretName"])
    check(
        secret_ref["items"] == [{"key": "statestore-nodes", "path": "password"}] and "statestore-nodes" in secret["data"],
        "password file = the broker Secret's statestore-nodes key",
    )
    bcm = m.one("ConfigMap", f"{RELEASE}-mqtt")
    conf = bcm["data"]["mosquitto.conf"].splitlines()
    check("set_tcp_nodelay true" in conf, "mosquitto: set_tcp_nodelay true")
    inflight = [int(line.split()[1]) for line in conf if line.startswith("max_inflight_messages ")]
    check(inflight and inflight[0] >= 100, f"mosquitto: max_inflight_messages {inflight} >= 100")
    check("use_username_as_clientid true" in conf, "mosquitto: use_username_as_clientid true")
    check("allow_anonymous false" in conf, "mosquitto: no anonymous clients")
    check("listener 1883" in conf, "mosquitto: listener 1883")
    acl = bcm["data"]["acl"].splitlines()
    for i in range(3):
        check(f"user statestore-node-{i + 1}" in acl, f"ACL: user statestore-node-{i + 1}")
    check("pattern readwrite clients/%u/#" in acl, "ACL: every client keeps to clients/<its id>/#")
    check(
        "topic read statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke" in acl,
        "ACL: the nodes take requests",
    )
    restrictive("broker", bpod)
    # init.sh's mosquitto_passwd -U writes through tmpfile() in /tmp: on the read-only root
    # filesystem the init container needs a /tmp of its own (the image rehearsal failed
    # without: "Unable to open temporary file. Read-only file system").
    (binit,) = bpod["initContainers"]
    bvolumes = {v["name"]: v for v in bpod["volumes"]}
    tmp = [vm["name"] for vm in binit["volumeMounts"] if vm["mountPath"] == "/tmp" and not vm.get("readOnly")]
    check(
        "mosquitto_passwd -U" in bcm["data"]["init.sh"] and len(tmp) == 1 and "emptyDir" in bvolumes[tmp[0]],
        "broker init container: a writable emptyDir at /tmp for mosquitto_passwd -U",
    )

    secure_by_default(m, name, container, pod, configs)
    # PDB, security, grace, checksum.
    pdb = m.one("PodDisruptionBudget")
    check(pdb["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdb["spec"], "PDB maxUnavailable 1")
    check(pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"], "PDB selects the members")
    restrictive("statestore", pod)
    check(pod["securityContext"].get("runAsUser", 0) != 0, "statestore runs as a non-root uid")
    check(pod["terminationGracePeriodSeconds"] > 10, f"termination grace {pod['terminationGracePeriodSeconds']} s > shutdown grace 10 s")
    checksum = spec["template"]["metadata"]["annotations"].get("checksum/config", "")
    check(len(checksum) == 64, "checksum/config annotation on the pods")
    check(not m.all("ServiceMonitor") and not m.all("PrometheusRule"), "ServiceMonitor and PrometheusRule off by default")
    check(not m.jobs("join"), "no join Job without scaling")
    # `helm rollback` runs the hooks stored with the revision it returns to: every revision
    # carries a remove hook for the ids above its own replica count.
    hooks = m.jobs("remove")
    if check(len(hooks) == 1, "remove hook rendered without a scale-down too (stored for a later rollback to this revision)"):
        (hook,) = hooks
        check(hook_events(hook) == {"pre-rollback"}, f"remove hook without a scale-down: pre-rollback only, an upgrade does not run it ({hook_events(hook)})")
        check(removed_ids(hook) == ["9", "8", "7", "6", "5", "4"], f"remove hook: every id above replicas 3, highest first ({removed_ids(hook)})")
    check(len(m.all("Job")) == len(hooks), "no other Job")

    # NetworkPolicy.
    np = m.one("NetworkPolicy")
    raft_rules = [r for r in np["spec"]["ingress"] if any(p["port"] in ("raft", raft_port) for p in r["ports"])]
    check(
        len(raft_rules) == 1
        and [pe.keys() for pe in raft_rules[0]["from"]] == [{"podSelector"}]
        and raft_rules[0]["from"][0]["podSelector"]["matchLabels"] == spec["selector"]["matchLabels"],
        "NetworkPolicy: Raft port only from the members",
    )
    http_rules = [r for r in np["spec"]["ingress"] if any(p["port"] in ("http", http_port) for p in r["ports"])]
    check(
        any("namespaceSelector" in pe for r in http_rules for pe in r["from"]),
        "NetworkPolicy: HTTP port from the monitoring namespace",
    )
    check(
        any(pe.get("podSelector", {}).get("matchLabels") == spec["selector"]["matchLabels"] for r in http_rules for pe in r["from"])
        and any(
            pe.get("podSelector", {}).get("matchLabels") == spec["selector"]["matchLabels"]
            for r in np["spec"]["egress"]
            if any(p["port"] == http_port for p in r["ports"])
            for pe in r["to"]
        ),
        "NetworkPolicy: members reach each other's HTTP port (admin commands run in a member)",
    )
    check("unhealthyPodEvictionPolicy" not in pdb["spec"], "PDB keeps the default eviction policy (not-ready members still vote)")
    egress_ports = {p["port"] for r in np["spec"]["egress"] for p in r["ports"]}
    check({raft_port, 1883, 53} <= egress_ports, f"NetworkPolicy egress: peers, broker, DNS ({sorted(egress_ports, key=str)})")

    # Dashboards: byte-identical ConfigMaps for the Grafana sidecar.
    boards = sorted((ROOT / "dashboards").glob("*.json"))
    cms = [c for c in m.all("ConfigMap") if c["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    check(len(boards) > 0 and len(cms) == len(boards), f"{len(cms)} dashboard ConfigMaps for {len(boards)} dashboards")
    for board in boards:
        data = [c["data"][board.name] for c in cms if board.name in c["data"]]
        chart_copy = CHART / "dashboards" / board.name
        check(
            len(data) == 1 and data[0].encode() == board.read_bytes(),
            f"ConfigMap data {board.name} is byte-identical to dashboards/{board.name}",
        )
        check(chart_copy.read_bytes() == board.read_bytes(), f"helm/statestore/dashboards/{board.name} = dashboards/{board.name}")
    check(
        (CHART / "dashboards" / "alerts.yaml").read_bytes() == (ROOT / "dashboards" / "alerts.yaml").read_bytes(),
        "helm/statestore/dashboards/alerts.yaml = dashboards/alerts.yaml",
    )

    # helm test pod: set, get, del of one key through the broker, as the test user.
    test = m.one("Pod")
    steps = test["spec"]["initContainers"] + test["spec"]["containers"]
    verbs = [c["args"][c["args"].index("--password-file") + 2] for c in steps]
    keys = {c["args"][c["args"].index("--password-file") + 3] for c in steps}
    check(verbs == ["set", "get", "del"] and len(keys) == 1, f"helm test: {verbs} of one key")
    check(
        all(c["args"][:3] == ["kv", "--broker", f["--broker"]] for c in steps)
        and all(c["args"][c["args"].index("--username") + 1] == "statestore-helm-test" for c in steps)
        and all(c["args"][c["args"].index("--client-id") + 1] == "statestore-helm-test" for c in steps),
        "helm test: statestore kv against the same broker as the nodes, as statestore-helm-test (= its client id)",
    )
    check(
        "user statestore-helm-test" in acl and "statestore-helm-test" in secret["data"],
        "helm test user has an ACL entry and a password",
    )
    check(test["metadata"]["annotations"]["helm.sh/hook"] == "test", "helm test hook")
    restrictive("helm test", test["spec"])
    return m, checksum, configs


def openssl_text(pem, *args):
    out = subprocess.run(["openssl", *args], input=pem, capture_output=True, check=False)
    return out.returncode, out.stdout.decode() + out.stderr.decode()


def secure_by_default(m, name, container, pod, configs):
    """Peer TLS, HTTPS and the admin token are on, with material the chart generated."""
    peer_tls = {k: f"/etc/statestore/tls/peers/{n}" for k, n in (("ca_file", "ca.crt"), ("cert_file", "tls.crt"), ("key_file", "tls.key"))}
    check(
        all(c["cluster"].get("tls") == peer_tls and "tls" not in c["mqtt"] for c in configs.values()),
        "default: [cluster.tls] on every member (no [mqtt.tls]: the bundled broker is plain text)",
    )
    check(
        all(
            c.get("admin") == {
                "tls": {"cert_file": "/etc/statestore/tls/http/tls.crt", "key_file": "/etc/statestore/tls/http/tls.key"},
                "token_file": "/etc/statestore/admin/token",
            }
            for c in configs.values()
        ),
        "default: [admin.tls] and admin.token_file, no allow_insecure_http",
    )
    check(
        all(c.get("telemetry", {}).get("log_format") == "json" for c in configs.values()),
        "default: telemetry.log_format = json (one JSON object per log line)",
    )
    secret = m.one("Secret", f"{name}-tls")
    check(secret.get("type") == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}, f"generated Secret {name}-tls: ca.crt, tls.crt, tls.key")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {vm["mountPath"]: vm["name"] for vm in container["volumeMounts"]}
    for path in ("/etc/statestore/tls/peers", "/etc/statestore/tls/http"):
        check(volumes[mounts[path]]["secret"]["secretName"] == f"{name}-tls", f"{path} is the generated Secret")
    token = m.one("Secret", f"{name}-admin-token")
    check(len(base64.b64decode(token["data"]["token"])) == 32, "generated admin token: 32 characters")
    ca, cert = (base64.b64decode(secret["data"][k]) for k in ("ca.crt", "tls.crt"))
    key = base64.b64decode(secret["data"]["tls.key"])
    with tempfile.NamedTemporaryFile(suffix=".pem") as ca_file:
        ca_file.write(ca)
        ca_file.flush()
        rc, out = openssl_text(cert, "verify", "-CAfile", ca_file.name)
        check(rc == 0, f"the generated certificate chains to the generated CA ({out.strip()[-60:]})")
    rc, out = openssl_text(cert, "x509", "-noout", "-ext", "subjectAltName,extendedKeyUsage,basicConstraints")
    headless = f"*.{name}-headless.{NS}.svc.{DOMAIN}"
    check(
        rc == 0
        and f"DNS:{headless}" in out
        and f"DNS:{name}.{NS}.svc.{DOMAIN}" in out
        and "IP Address:127.0.0.1" in out
        and "TLS Web Server Authentication" in out
        and "TLS Web Client Authentication" in out
        and "CA:FALSE" in out,
        f"the certificate names every pod ({headless}), the admin Service and 127.0.0.1, for server and client use",
    )
    rc_cert, cert_mod = openssl_text(cert, "x509", "-noout", "-pubkey")
    rc_key, key_mod = openssl_text(key, "pkey", "-pubout")
    check(rc_cert == 0 and rc_key == 0 and cert_mod == key_mod, "tls.key is the certificate's key")
    rc, out = openssl_text(cert, "x509", "-noout", "-checkend", str(9 * 365 * 86400))
    check(rc == 0, "the generated certificate is valid for years (ten)")


def plain_render():
    print("== tls.peers, tls.http and admin.token off")
    m = Manifests(render("--set", "tls.peers.enabled=false,tls.http.enabled=false,admin.token.enabled=false"))
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    configs, _ = node_configs(m, sts)
    check(
        all("tls" not in c["cluster"] and c.get("admin") == {"allow_insecure_http": True} for c in configs.values()),
        "off: no [cluster.tls], and admin.allow_insecure_http (the nodes bind 0.0.0.0 without a token)",
    )
    check(not m.maybe("Secret", f"{name}-tls") and not m.maybe("Secret", f"{name}-admin-token"), "off: nothing generated")
    check(all(container[p]["httpGet"].get("scheme", "HTTP") == "HTTP" for p in ("startupProbe", "livenessProbe", "readinessProbe")), "off: probes use HTTP")
    m = Manifests(render("--set", "tls.peers.enabled=false"))
    configs, _ = node_configs(m, m.one("StatefulSet"))
    check(
        all("tls" not in c["cluster"] and c["admin"].get("token_file") and "allow_insecure_http" not in c["admin"] for c in configs.values()),
        "tls.peers off alone: the token stays, no insecure flag",
    )
    check(m.maybe("Secret", f"{name}-tls") is not None, "tls.http still generates its Secret")


def authorization_render():
    print("== authorization: the policy ConfigMap and the broker plugin")
    m = Manifests(render())
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    configs, _ = node_configs(m, sts)
    check(all("auth" not in c for c in configs.values()) and not m.maybe("ConfigMap", f"{name}-policy"), "default: no policy, no [auth]")
    conf = m.one("ConfigMap", f"{RELEASE}-mqtt")["data"]["mosquitto.conf"]
    check("plugin " not in conf, "default: the broker loads no plugin")
    policy = (ROOT / "tests/testdata/authorization/policy.toml").read_text()
    m = Manifests(render(
        "--set", "config.auth.identity=broker", "--set", "mqtt.statestorePlugin.enabled=true",
        "--set-file", f"authorization.policy={ROOT / 'tests/testdata/authorization/policy.toml'}",
    ))
    sts = m.one("StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    configs, _ = node_configs(m, sts)
    path = "/etc/statestore/policy/policy.toml"
    check(
        all(c["auth"] == {"identity": "broker", "policy_file": path} for c in configs.values()),
        "every node: auth.identity = broker and the mounted policy file",
    )
    check(m.one("ConfigMap", f"{name}-policy")["data"]["policy.toml"].strip() == policy.strip(), "the policy ConfigMap holds the file as given")
    mount = next((v for v in container["volumeMounts"] if v["mountPath"] == "/etc/statestore/policy"), None)
    volume = next((v for v in spec["volumes"] if v["name"] == (mount or {}).get("name")), None)
    check(
        mount is not None and "subPath" not in mount and mount.get("readOnly")
        and volume is not None and volume["configMap"]["name"] == f"{name}-policy",
        "the policy is mounted whole (no subPath: the kubelet updates it, the nodes reload it)",
    )
    default_checksum = Manifests(render()).one("StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    other = Manifests(render(
        "--set", "config.auth.identity=broker", "--set", "mqtt.statestorePlugin.enabled=true",
        "--set", "authorization.policy=[groups]",
    ))
    check(
        other.one("StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        == sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != default_checksum,
        "a policy edit does not change checksum/config (no restart); turning authorization on does",
    )
    conf = m.one("ConfigMap", f"{RELEASE}-mqtt")["data"]["mosquitto.conf"]
    check(
        "\nplugin /usr/lib/statestore/libstatestore_mosquitto_plugin.so\n" in conf
        and "\nplugin_opt_check_response_topic true" in conf
        and "\nper_listener_settings false\n" in conf,
        "mqtt.statestorePlugin: mosquitto.conf loads the plugin for every listener",
    )


def generated_material_is_kept():
    print("== generated TLS material and token: kept across upgrades (lookup), new without one")
    first = Manifests(render())
    name = first.one("StatefulSet")["metadata"]["name"]
    tls, token = first.one("Secret", f"{name}-tls"), first.one("Secret", f"{name}-admin-token")
    again = Manifests(render())
    check(again.one("Secret", f"{name}-tls")["data"] != tls["data"], "helm template (no lookup): new material each render")
    objects = {("v1", "Secret", NS, f"{name}-tls"): tls, ("v1", "Secret", NS, f"{name}-admin-token"): token}
    with FakeApiServer(objects) as api:
        cmd = [HELM, "template", RELEASE, str(CHART), "-n", NS, "--dry-run=server", "--is-upgrade", "--disable-openapi-validation"]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **api.env})
    if not check(out.returncode == 0, "upgrade against an API server holding the generated Secrets renders"):
        print(f"     stderr: {out.stderr.strip()[:400]}")
        return
    upgraded = Manifests([d for d in yaml.safe_load_all(out.stdout) if d])
    check(upgraded.one("Secret", f"{name}-tls")["data"] == tls["data"], "upgrade: the CA, certificate and key are kept")
    check(upgraded.one("Secret", f"{name}-admin-token")["data"] == token["data"], "upgrade: the admin token is kept")
    check(f"/api/v1/namespaces/{NS}/secrets/{name}-tls" in api.requests, "looked up the installed Secret")


def scale_render(default_checksum, default_configs):
    print("== scale up: replicas 5, bootstrapReplicas 3")
    m = Manifests(render("--set", "replicas=5"))
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    configs, _ = node_configs(m, sts)
    check(sts["spec"]["replicas"] == 5, "replicas 5")
    for i in range(3):
        check(configs[f"{name}-{i}.toml"] == default_configs[f"{name}-{i}.toml"], f"pod {i}: file unchanged by scaling")
    for i in (3, 4):
        c = configs[f"{name}-{i}.toml"]
        check(c["id"] == i + 1 and c["cluster"].get("join") is True and "peers" not in c["cluster"], f"pod {i}: node {i + 1} joins")
    check(
        sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"] == default_checksum,
        "scaling does not change checksum/config (running pods do not roll)",
    )
    (job,) = m.jobs("join")
    hooks = m.jobs("remove")
    check(
        len(hooks) == 1 and hook_events(hooks[0]) == {"pre-rollback"} and removed_ids(hooks[0]) == ["9", "8", "7", "6"],
        f"replicas 5: its rollback hook removes ids above 5 only (a rollback to this revision keeps 4 and 5): {[removed_ids(h) for h in hooks]}",
    )
    headless = sts["spec"]["serviceName"]
    admin = f"https://{name}.{NS}.svc.{DOMAIN}:7480"
    adds = [c["args"] for c in job["spec"]["template"]["spec"]["initContainers"]]
    opts = ["--ca", "/etc/statestore/tls/http/ca.crt", "--token-file", "/etc/statestore/admin/token"]
    want = [
        ["cluster", "--endpoint", admin, *opts, "add-node", "--id", str(i + 1), "--raft", f"{name}-{i}.{headless}.{NS}.svc.{DOMAIN}:7481"]
        for i in (3, 4)
    ]
    check(adds == want, "join Job: add-node 4 and 5 at their peer addresses, through the admin Service over HTTPS with the CA and the token")
    jvolumes = {v["name"]: v["secret"] for v in job["spec"]["template"]["spec"]["volumes"]}
    check(
        jvolumes.get("http-ca", {}).get("secretName") == f"{name}-tls"
        and jvolumes["http-ca"].get("items") == [{"key": "ca.crt", "path": "ca.crt"}],
        "join Job: only ca.crt of the generated Secret",
    )
    check("helm.sh/hook" not in job["metadata"].get("annotations", {}), "join Job is not a hook (helm --wait would wait on the joiners forever)")
    check(str(job["metadata"]["name"]).endswith("-r1"), "join Job is named after the revision")
    labels = job["spec"]["template"]["metadata"]["labels"]
    np = m.one("NetworkPolicy")
    allowed = [pe["podSelector"]["matchLabels"] for r in np["spec"]["ingress"] for pe in r["from"] if "podSelector" in pe]
    check(any(sel.items() <= labels.items() for sel in allowed), "NetworkPolicy lets the Job reach the admin API")
    restrictive("join Job", job["spec"]["template"]["spec"])

    print("== scale down: 5 -> 3 (membership.previousReplicas)")
    m = Manifests(render("--set", "membership.previousReplicas=5"))
    job = m.one("Job")
    check(hook_events(job) == {"pre-upgrade", "pre-rollback"}, f"remove Job is a pre-upgrade and pre-rollback hook ({hook_events(job)})")
    removes = removed_ids(job)
    check(removes == ["9", "8", "7", "6", "5", "4"], f"remove Job: remove-node {removes} (4 and 5 included), highest id first")
    m = Manifests(render("--set", "replicas=9", "--set", "mqtt.auth.statestoreNodes=9"))
    check(not m.jobs("remove"), "replicas 9: no remove hook (no member id above 9)")
    m = Manifests(render("--set", "membership.automate=false", "--set", "replicas=5"))
    check(not m.all("Job"), "membership.automate=false: no Job")


def monitoring_render():
    print("== ci/monitoring-values.yaml")
    m = Manifests(render("-f", str(CHART / "ci" / "monitoring-values.yaml")))
    sm = m.one("ServiceMonitor")
    sel = sm["spec"]["selector"]["matchLabels"]
    svcs = [s for s in m.all("Service") if sel.items() <= s["metadata"]["labels"].items()]
    check(len(svcs) == 1 and svcs[0]["spec"].get("publishNotReadyAddresses") is True, "ServiceMonitor selects the headless Service only")
    ports = {p["name"] for p in svcs[0]["spec"]["ports"]}
    check(all(e["port"] in ports and e["path"] == "/metrics" for e in sm["spec"]["endpoints"]), "ServiceMonitor scrapes /metrics on the http port")
    name = m.one("StatefulSet")["metadata"]["name"]
    (ep,) = sm["spec"]["endpoints"]
    check(
        ep.get("scheme") == "https"
        and ep.get("tlsConfig", {}).get("ca", {}).get("secret") == {"name": f"{name}-tls", "key": "ca.crt"}
        and ep["tlsConfig"].get("serverName") == f"{name}.{NS}.svc.{DOMAIN}",
        "ServiceMonitor (defaults): https, the generated CA, server name = the admin Service (which the certificate names)",
    )
    jobs = [r["replacement"] for e in sm["spec"]["endpoints"] for r in e.get("relabelings", []) if r.get("targetLabel") == "job"]
    check(len(jobs) == 1 and "statestore" in jobs[0], f"scrape job {jobs} matches the alerts' job=~\".*statestore.*\"")
    rule = m.one("PrometheusRule")
    alerts = yaml.safe_load((ROOT / "dashboards" / "alerts.yaml").read_text())
    check(rule["spec"]["groups"] == alerts["groups"], "PrometheusRule groups = dashboards/alerts.yaml")


def external_render():
    print("== ci/external-broker-values.yaml")
    values = yaml.safe_load((CHART / "ci" / "external-broker-values.yaml").read_text())
    m = Manifests(render("-f", str(CHART / "ci" / "external-broker-values.yaml")))
    check(not m.all("Deployment"), "no bundled broker")
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    f = flags(container["args"])
    check(f["--broker"] == values["broker"]["address"], "--broker = broker.address")
    configs, _ = node_configs(m, sts)
    users = [configs[f"{name}-{i}.toml"]["mqtt"]["username"] for i in range(3)]
    want = [values["broker"]["username"].replace("{id}", str(i + 1)) for i in range(3)]
    check(users == want, f"user names {users}")
    secret = m.one("Secret", f"{name}-broker")
    check(set(secret["data"]) == {"password"}, "generated broker Secret")
    np = m.one("NetworkPolicy")
    port = int(values["broker"]["address"].rsplit(":", 1)[1])
    check(any(p["port"] == port for r in np["spec"]["egress"] for p in r["ports"]), f"NetworkPolicy egress to the broker port {port}")


def tls_render():
    print("== ci/tls-values.yaml")
    values = yaml.safe_load((CHART / "ci" / "tls-values.yaml").read_text())
    m = Manifests(render("-f", str(CHART / "ci" / "tls-values.yaml")))
    sts = m.one("StatefulSet")
    name = sts["metadata"]["name"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    f = flags(container["args"])
    mounts = {vm["mountPath"]: vm for vm in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    def provides(path, mounted, vols, secret, key):
        """path is the file of key `key` of Secret `secret`, mounted read-only without subPath."""
        directory, filename = path.rsplit("/", 1)
        vm = mounted.get(directory)
        ok = bool(vm) and vm.get("readOnly") is True and "subPath" not in vm
        if ok:
            ref = vols[vm["name"]].get("secret", {})
            items = ref.get("items")
            ok = ref.get("secretName") == secret and (
                key == filename if items is None else {i["key"]: i["path"] for i in items}.get(key) == filename
            )
        return check(ok, f"{path} is key {key} of Secret {secret}, mounted read-only (no subPath)")

    configs, _ = node_configs(m, sts)
    tls = values["tls"]
    for i in range(5):
        c = configs[f"{name}-{i}.toml"]
        mt = c["mqtt"].get("tls", {})
        check(
            mt.get("enabled") is True
            and {k: mt.get(k) for k in ("ca_file", "cert_file", "key_file")}
            == {k: f"/etc/statestore/tls/broker/{n}" for k, n in (("ca_file", "ca.crt"), ("cert_file", "tls.crt"), ("key_file", "tls.key"))},
            f"pod {i}: [mqtt.tls] enabled with ca_file, cert_file, key_file",
        )
        check(
            mt.get("reload_interval_ms") == tls["broker"]["reloadIntervalMs"],
            f"pod {i}: [mqtt.tls] reload_interval_ms = tls.broker.reloadIntervalMs ({mt.get('reload_interval_ms')})",
        )
        check(
            c["cluster"].get("tls") == {k: f"/etc/statestore/tls/peers/{n}" for k, n in (("ca_file", "ca.crt"), ("cert_file", "tls.crt"), ("key_file", "tls.key"))},
            f"pod {i}: [cluster.tls] ca_file, cert_file, key_file",
        )
        check(
            c.get("admin", {}).get("tls") == {"cert_file": "/etc/statestore/tls/http/tls.crt", "key_file": "/etc/statestore/tls/http/tls.key"}
            and c["admin"].get("token_file") == "/etc/statestore/admin/token",
            f"pod {i}: [admin.tls] and admin.token_file",
        )
    c = configs[f"{name}-0.toml"]
    for path, key in ((c["mqtt"]["tls"]["ca_file"], "ca.crt"), (c["mqtt"]["tls"]["cert_file"], "tls.crt"), (c["mqtt"]["tls"]["key_file"], "tls.key")):
        provides(path, mounts, volumes, tls["broker"]["secretName"], key)
    for path, key in ((c["cluster"]["tls"]["ca_file"], "ca.crt"), (c["cluster"]["tls"]["cert_file"], "tls.crt"), (c["cluster"]["tls"]["key_file"], "tls.key")):
        provides(path, mounts, volumes, tls["peers"]["secretName"], key)
    for path, key in ((c["admin"]["tls"]["cert_file"], "tls.crt"), (c["admin"]["tls"]["key_file"], "tls.key")):
        provides(path, mounts, volumes, tls["http"]["secretName"], key)
    token = m.one("Secret", f"{name}-admin-token")
    check(len(token["data"].get("token", "")) >= 24, "generated admin token Secret (key token, 16+ characters)")
    check(m.maybe("Secret", f"{name}-tls") is None, "given Secrets: no TLS material generated")
    provides(c["admin"]["token_file"], mounts, volumes, token["metadata"]["name"], "token")
    check(f["--broker"] == values["broker"]["address"], "--broker = broker.address (TLS from [mqtt.tls])")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        check(container[probe]["httpGet"].get("scheme") == "HTTPS", f"{probe} uses HTTPS")
    admin_host = f"{name}.{NS}.svc.{DOMAIN}"

    (job,) = m.jobs("join")
    jpod = job["spec"]["template"]["spec"]
    jvolumes = {v["name"]: v for v in jpod.get("volumes", [])}
    steps = jpod["initContainers"] + jpod["containers"]
    check(len(steps) == 3, "join Job: add-node 4, add-node 5, status")
    for step in steps:
        jf = flags(step["args"])
        jmounts = {vm["mountPath"]: vm for vm in step.get("volumeMounts", [])}
        check(
            step["args"][:2] == ["cluster", "--endpoint"] and jf["--endpoint"] == f"https://{admin_host}:7480",
            f"join Job/{step['name']}: --endpoint https://{admin_host}:7480",
        )
        check("--ca" in jf and "--token-file" in jf, f"join Job/{step['name']}: passes --ca and --token-file")
        provides(jf["--ca"], jmounts, jvolumes, tls["http"]["secretName"], "ca.crt")
        provides(jf["--token-file"], jmounts, jvolumes, token["metadata"]["name"], "token")
    check(
        all(set(v["secret"].get("items", [{}])[0].values()) <= {"ca.crt", "token"} and len(v["secret"]["items"]) == 1 for v in jvolumes.values()),
        "join Job mounts only the CA and the token (no private key)",
    )
    hook = Manifests(render("-f", str(CHART / "ci" / "tls-values.yaml"), "--set", "replicas=3", "--set", "membership.previousReplicas=5")).one("Job")
    for step in hook["spec"]["template"]["spec"]["initContainers"] + hook["spec"]["template"]["spec"]["containers"]:
        jf = flags(step["args"])
        check(
            jf.get("--endpoint") == f"https://{admin_host}:7480"
            and jf.get("--ca") == "/etc/statestore/tls/http/ca.crt"
            and jf.get("--token-file") == "/etc/statestore/admin/token"
            and {vm["mountPath"] for vm in step.get("volumeMounts", [])} == {"/etc/statestore/tls/http", "/etc/statestore/admin"},
            f"remove hook/{step['name']}: https endpoint, --ca and --token-file mounted",
        )

    sm = m.one("ServiceMonitor")
    (ep,) = sm["spec"]["endpoints"]
    check(
        ep.get("scheme") == "https"
        and ep.get("tlsConfig", {}).get("ca", {}).get("secret") == {"name": tls["http"]["secretName"], "key": "ca.crt"}
        and ep["tlsConfig"].get("serverName") == admin_host,
        "ServiceMonitor: https, CA from the tls.http Secret, server name = the admin Service",
    )
    test = m.one("Pod")
    tvolumes = {v["name"]: v for v in test["spec"]["volumes"]}
    for step in test["spec"]["initContainers"] + test["spec"]["containers"]:
        tmounts = {vm["mountPath"]: vm for vm in step.get("volumeMounts", [])}
        args = step["args"]
        check("--ca" in args and "--cert" not in args and "--key" not in args, f"helm test/{step['name']}: kv --ca, no client certificate")
        provides(args[args.index("--ca") + 1], tmounts, tvolumes, tls["broker"]["secretName"], "ca.crt")
    np = m.one("NetworkPolicy")
    check(any(p["port"] == 8883 for r in np["spec"]["egress"] for p in r["ports"]), "NetworkPolicy egress to the broker's TLS port 8883")

    print("== tls.broker with the system CA bundle, server name")
    m = Manifests(render("-f", str(CHART / "ci" / "tls-values.yaml"), "--set", "tls.broker.secretName=", "--set", "tls.broker.clientCert=false", "--set", "tls.broker.serverName=mqtt.example.com", "--set", "tls.broker.reloadIntervalMs=null"))
    sts = m.one("StatefulSet")
    c = node_configs(m, sts)[0][f"{name}-0.toml"]
    check(c["mqtt"]["tls"] == {"enabled": True, "server_name": "mqtt.example.com"}, "[mqtt.tls] enabled and server_name only (reloadIntervalMs null: the node's default)")
    m = Manifests(render("-f", str(CHART / "ci" / "tls-values.yaml"), "--set", "tls.broker.reloadIntervalMs=0"))
    c = node_configs(m, m.one("StatefulSet"))[0][f"{name}-0.toml"]
    check(c["mqtt"]["tls"].get("reload_interval_ms") == 0, "tls.broker.reloadIntervalMs 0 is written (reloading off), not dropped as empty")
    check(not any("/etc/statestore/tls/broker" == vm["mountPath"] for vm in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]), "no broker TLS volume")


def scheduling_render():
    print("== ci/scheduling-values.yaml")
    path = CHART / "ci" / "scheduling-values.yaml"
    values = yaml.safe_load(path.read_text())
    out = helm_template("-f", str(path))
    if not check(out.returncode == 0, "resources given as numbers (cpu: 1, cpu: 1.5, memory in bytes) are accepted"):
        print(f"     stderr: {out.stderr.strip()[:400]}")
        return
    m = Manifests([d for d in yaml.safe_load_all(out.stdout) if d])
    (container,) = m.one("StatefulSet")["spec"]["template"]["spec"]["containers"]
    check(container["resources"] == values["resources"], f"container resources = the values, numbers kept ({container['resources']})")

    # The same placement for every pod of the release; no priority class for the helm test pod.
    m = Manifests(render("-f", str(path)))
    sts = m.one("StatefulSet")
    jobs = {j["metadata"]["name"].removeprefix(f"{sts['metadata']['name']}-"): j for j in m.all("Job")}
    pods = {"StatefulSet": sts["spec"]["template"]["spec"], "helm test pod": m.one("Pod")["spec"]}
    pods.update({f"{'remove hook' if n.startswith('remove-') else 'join Job'} {n}": j["spec"]["template"]["spec"] for n, j in jobs.items()})
    check(sorted(jobs) == ["join-r1", "remove-r1"], f"join Job and remove hook rendered ({sorted(jobs)})")
    for where, spec in pods.items():
        for key in ("nodeSelector", "tolerations", "imagePullSecrets"):
            check(spec.get(key) == values[key], f"{where}: {key} = the values' {key}")
        want = None if where == "helm test pod" else values["priorityClassName"]
        check(spec.get("priorityClassName") == want, f"{where}: priorityClassName {want}")


def against_cluster(existing, *args):
    """helm template --dry-run=server --is-upgrade against a fake API server holding `existing`
    as the release's StatefulSet (None: no StatefulSet), so that lookup finds it."""
    objects = {("apps/v1", "StatefulSet", NS, f"{RELEASE}-statestore"): existing} if existing else {}
    with FakeApiServer(objects) as api:
        cmd = [HELM, "template", RELEASE, str(CHART), "-n", NS, "--dry-run=server", "--is-upgrade", "--disable-openapi-validation", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **api.env})
    return out, api.requests


def upgrade_lookups():
    print("== upgrades against a (fake) API server: lookup of the release's StatefulSet")
    sts = Manifests(render()).one("StatefulSet")
    # As the API server returns it: defaulted fields, quantities in canonical form.
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = "Filesystem"
    sts["spec"]["volumeClaimTemplates"][0]["status"] = {"phase": "Pending"}
    sts["status"] = {"replicas": 3}

    def variant(size=None, storage_class=None, modes=None, replicas=None):
        v = copy.deepcopy(sts)
        t = v["spec"]["volumeClaimTemplates"][0]["spec"]
        if size:
            t["resources"]["requests"]["storage"] = size
        if storage_class:
            t["storageClassName"] = storage_class
        if modes:
            t["accessModes"] = modes
        if replicas:
            v["spec"]["replicas"] = replicas
        return v

    out, requests = against_cluster(sts)
    check(
        out.returncode == 0 and f"/apis/apps/v1/namespaces/{NS}/statefulsets/{RELEASE}-statestore" in requests,
        "unchanged persistence: the upgrade renders, after looking the StatefulSet up",
    )
    if out.returncode != 0:
        print(f"     stderr: {out.stderr.strip()[:400]}")
    out, _ = against_cluster(variant(size="1Gi"), "--set", "persistence.size=1024Mi")
    check(out.returncode == 0, "persistence.size 1024Mi = the StatefulSet's 1Gi (quantities compared as bytes)")
    refused = [
        (sts, ["--set", "persistence.size=20Gi"], "persistence.size is 20Gi, but the StatefulSet demo-statestore has volume claims of 10Gi"),
        (variant(size="10G"), [], "persistence.size is 10Gi, but the StatefulSet demo-statestore has volume claims of 10G"),
        (sts, ["--set", "persistence.storageClassName=fast"], 'persistence.storageClassName is "fast", but the StatefulSet demo-statestore has volume claims of StorageClass ""'),
        (variant(storage_class="standard"), [], 'persistence.storageClassName is "", but the StatefulSet demo-statestore has volume claims of StorageClass "standard"'),
        (sts, ["--set", "persistence.accessModes={ReadWriteOncePod}"], 'persistence.accessModes is ["ReadWriteOncePod"], but the StatefulSet demo-statestore has volume claims with ["ReadWriteOnce"]'),
    ]
    for existing, args, message in refused:
        out, _ = against_cluster(existing, *args)
        check(out.returncode != 0 and message in out.stderr and "kubectl delete statefulset" * ("size" in message) in out.stderr,
              f"immutable volumeClaimTemplates: refused with {message!r}")
        if out.returncode == 0 or message not in out.stderr:
            print(f"     rc={out.returncode} stderr: {out.stderr.strip()[:400]}")
    out, _ = against_cluster(None, "--set", "persistence.size=20Gi")
    check(out.returncode == 0, "no StatefulSet yet (install): nothing to compare")

    # Peer TLS cannot be switched by a rolling update: refused unless said explicitly.
    plain = Manifests(render("--set", "tls.peers.enabled=false")).one("StatefulSet")
    out, _ = against_cluster(plain)
    message = "tls.peers.enabled is true, but the running StatefulSet demo-statestore has peer TLS off"
    check(out.returncode != 0 and message in out.stderr and "switchRunningRelease=true" in out.stderr, "upgrading a plain-text release to the TLS default: refused, naming the way out")
    out, _ = against_cluster(plain, "--set", "tls.peers.switchRunningRelease=true")
    check(out.returncode == 0, "... and rendered with tls.peers.switchRunningRelease")
    out, _ = against_cluster(plain, "--set", "tls.peers.enabled=false")
    check(out.returncode == 0, "... or kept plain with tls.peers.enabled=false")
    out, _ = against_cluster(sts, "--set", "tls.peers.enabled=false")
    check(out.returncode != 0 and "tls.peers.enabled is false, but the running StatefulSet demo-statestore has peer TLS on" in out.stderr, "switching peer TLS off under a running release: refused too")

    # The remove hook finds the current size with the same lookup.
    for replicas, events in ((5, {"pre-upgrade", "pre-rollback"}), (3, {"pre-rollback"})):
        out, _ = against_cluster(variant(replicas=replicas))
        hooks = Manifests([d for d in yaml.safe_load_all(out.stdout) if d]).jobs("remove") if out.returncode == 0 else []
        check(
            len(hooks) == 1 and hook_events(hooks[0]) == events,
            f"StatefulSet at {replicas} replicas, values 3: the remove hook is {sorted(events)} ({[sorted(hook_events(h)) for h in hooks]})",
        )


def failing_renders():
    print("== values that must be refused")
    cases = [
        (["--set", "replicas=0"], "at '/replicas': value must be one of 1, 3, 5, 7, 9"),
        (["--set", "replicas=4"], "at '/replicas': value must be one of 1, 3, 5, 7, 9"),
        (["--set", "replicas=2"], "at '/replicas': value must be one of 1, 3, 5, 7, 9"),
        (["--set", "cluster.bootstrapReplicas=4"], "at '/cluster/bootstrapReplicas'"),
        (["--set", "replicas=1"], "replicas (1) must be at least cluster.bootstrapReplicas (3)"),
        (["--set", "image.repository="], "image.repository is required"),
        (["--set", "mqtt.enabled=false"], "broker.address is required when mqtt.enabled is false"),
        (["--set", "config.limits.max_keyz=1"], "additional properties 'max_keyz' not allowed"),
        (["--set", "config.id=7"], "additional properties 'id' not allowed"),
        (["--set", "config.devicebound.max_queue_depth=6000"], "at '/config/devicebound/max_queue_depth': maximum"),
        (["--set", "terminationGracePeriodSeconds=10"], "must be above the node's shutdown grace"),
        (["--set", "replicas=9"], "mqtt.auth.statestoreNodes (7) must be at least replicas (9)"),
        (["--set", "mqtt.config.maxInflightMessages=20"], "at '/config/maxInflightMessages': minimum"),
        (["--set", "mqtt.auth.users[0].name=statestore"], "at '/auth/users/0/name'"),
        (["--set", "metrics.serviceMonitor.enabled=true", "--set", "fullnameOverride=kv"], 'the scrape job name "kv" must contain "statestore"'),
        (["--set", "replica=3"], "additional properties 'replica' not allowed"),
        (["--set", "tls.broker.enabled=true"], "tls.broker needs an external broker (mqtt.enabled=false"),
        (["--set", "tls.broker.clientCert=true"], "tls.broker.clientCert needs tls.broker.secretName"),
        (["--set", "admin.token.key=a/b"], "at '/admin/token/key'"),
        (["--set", "config.admin.token_file=/x"], "additional properties 'admin' not allowed"),
        (["--set", "config.cluster.tls.ca_file=/x"], "additional properties 'tls' not allowed"),
        (["--set", "config.cluster.max_snapshot_mb=0"], "at '/config/cluster/max_snapshot_mb': minimum"),
        (["--set-string", "resources.requests.memory=512MB"], "at '/resources/requests/memory': 'anyOf' failed"),
        (["--set", "resources.limits.cpu=-1"], "at '/resources/limits/cpu': 'anyOf' failed"),
        (["--set", "resources.limits.cpu=true"], "at '/resources/limits/cpu': 'anyOf' failed"),
        (["--set", "tls.broker.reloadIntervalMs=-1"], "at '/tls/broker/reloadIntervalMs': minimum"),
        (["--set", "tls.broker.reloadIntervalMs=86400001"], "at '/tls/broker/reloadIntervalMs': maximum"),
        (["--set", "ports.raft=7480"], "ports.http and ports.raft are both 7480"),
        (["--set", "ports.http=7481"], "ports.http and ports.raft are both 7481"),
        (["--set", "ports.http=0"], "at '/ports/http': minimum"),
        (["--set", "ports.raft=65536"], "at '/ports/raft': maximum"),
        (["--set", "mqtt.service.port=65536"], "at '/service/port': maximum"),
        (["--set", "mqtt.enabled=false", "--set", "broker.address=mqtt:0"], "at '/broker/address': 'mqtt:0' does not match pattern"),
        (["--set", "mqtt.enabled=false", "--set", "broker.address=mqtt:65536"], "at '/broker/address': 'mqtt:65536' does not match pattern"),
        (["--set", "mqtt.enabled=false", "--set", "broker.address=mqtt:99999"], "at '/broker/address': 'mqtt:99999' does not match pattern"),
        (["--set", "config.auth.identity=broker"], "config.auth.identity = broker with the bundled Mosquitto needs mqtt.statestorePlugin.enabled"),
        (["--set", "config.auth.identity=vouched"], "at '/config/auth/identity'"),
        (["--set", "authorization.policy=x", "--set", "config.auth.policy_file=/x"], "set the policy either as authorization.policy"),
        (["--set", "mqtt.statestorePlugin.path=plugin.so"], "at '/statestorePlugin/path'"),
    ]
    for args, message in cases:
        out = helm_template(*args)
        check(out.returncode != 0 and message in out.stderr, f"{' '.join(args[1::2])}: refused with {message!r}")
        if out.returncode == 0 or message not in out.stderr:
            print(f"     rc={out.returncode} stderr: {out.stderr.strip()[:400]}")
    for port in (1, 65535):
        out = helm_template("--set", "mqtt.enabled=false", "--set", f"broker.address=mqtt:{port}")
        check(out.returncode == 0 and f"- mqtt:{port}\n" in out.stdout, f"broker.address port {port} accepted")
    out = helm_template("--set", "config.shutdown_grace_ms=40000")
    check(out.returncode == 0 and "terminationGracePeriodSeconds: 60" in out.stdout, "termination grace follows shutdown_grace_ms (40 s -> 60 s)")
    m = Manifests(render("--set-json", 'config={"limits":{"max_keys":200000}}'))
    sts = m.one("StatefulSet")
    return sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def schema_covers_values():
    print("== every value has a schema entry")

    def resolve(schema, node):
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].split("/")[-1]]
        return node

    def walk(schema, node, values, path):
        node = resolve(schema, node)
        props = node.get("properties")
        if props is None or not isinstance(values, dict):
            return
        for key, value in values.items():
            if key not in props:
                check(False, f"{path}{key} has no schema entry")
                continue
            walk(schema, props[key], value, f"{path}{key}.")

    for values_file, schema_file, prefix in (
        (CHART / "values.yaml", CHART / "values.schema.json", ""),
        (CHART / "charts/mosquitto/values.yaml", CHART / "charts/mosquitto/values.schema.json", "mqtt."),
    ):
        schema = json.loads(schema_file.read_text())
        before = failures
        walk(schema, schema, yaml.safe_load(values_file.read_text()), prefix)
        check(failures == before, f"{values_file.relative_to(ROOT)}: every key is in {schema_file.name}")


def main():
    _, checksum, configs = default_render()
    plain_render()
    authorization_render()
    generated_material_is_kept()
    scale_render(checksum, configs)
    monitoring_render()
    external_render()
    tls_render()
    scheduling_render()
    upgrade_lookups()
    changed = failing_renders()
    check(changed != checksum, "a config change changes checksum/config (the pods roll)")
    schema_covers_values()
    print(f"{passes} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
