#!/usr/bin/env python3
"""A rehearsal of what the chart's StatefulSet does, without Kubernetes.

    rehearse.py HELM REPO_ROOT STATESTORE_BIN [--tls | --plain]

It renders the chart with helm and plays its pods as local processes: the real `statestore`
binary with exactly the container args of the StatefulSet (the kubelet's $(VAR) expansion
done from the container's env) and each pod's TOML file, the real `mosquitto` with the
subchart's mosquitto.conf, ACL and init script (passwords from the rendered Secret; later
renders keep the installed Secrets, as the chart's lookup does on a cluster). Only names are
rewritten: every pod DNS name, the broker Service and each pod's 0.0.0.0 listeners become
127.0.0.1 ports, the admin Service a ready member's port, every volume a directory
(PersistentVolumeClaims survive a pod's restart). Job containers run in order, and again on
failure under restartPolicy OnFailure. Then:

  1. install: broker + 3 members; all pass their readiness probe (/readyz)
  2. a SET and a GET over MQTT 5 (mqtt5.py as the chart's test user, through its ACL)
  3. kill -9 the leader: the store keeps serving (GET, SET); restart the pod with its data
  4. SIGTERM another member: the restarted one must now be part of the quorum (GET, SET)
  5. scale to 5 (helm render with replicas=5): the new pods join and the chart's join Job's
     commands make them voters; the first three pods' files and template are unchanged
  6. scale back to 3 (the pre-upgrade hook's commands: remove-node 9 down to 4, the ids that
     are not members included), stop pods 4 and 3; every key is there
  7. scale to 5 again: pods 3 and 4 start on their kept volumes and the join Job adds them
  8. `helm rollback` to the install: the hook stored with revision 1 (pre-rollback, rendered
     with replicas 3) removes 5 and 4, then pods 4 and 3 stop; every key is there
  9. the `helm test` pod's commands (statestore kv set/get/del) when the binary has `kv`

By default the chart's defaults: tls.peers, tls.http and admin.token on, with the CA,
certificate and token the chart generated (the certificate names 127.0.0.1, where the
rewritten names point): the members form the cluster over mutual TLS (each accepting only
certificates that name a member), probes and the rehearsal's status reads use HTTPS
(unverified, as the kubelet's), the Job and hook commands check the certificate with --ca and
send --token-file, and an add-node without the token must be refused. With --tls the same
with a Secret of the user's (made here with openssl: a CA and a certificate for the headless
wildcard, the admin Service and 127.0.0.1). With --plain all three are off: plain text, and
the members start on 0.0.0.0 without a token only because the chart sets
admin.allow_insecure_http; --plain also turns authorization on (mqtt.statestorePlugin, the
nodes' config.auth.identity = "broker", authorization.policy = rehearsal-policy.toml): the
broker loads the plugin at $STATESTORE_MOSQUITTO_PLUGIN in place of the image's path, every
step runs as the policy's test user, and a GET outside its keys must be `not authorized`.
tls.broker is not rehearsed (it needs an external broker; the bundled Mosquitto is plain text).

Exits 1 on the first failure, printing the logs' tails. Keeps its directory with KEEP=1.
"""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

sys.dont_write_bytecode = True  # no __pycache__ next to mqtt5.py in the repository
import mqtt5  # noqa: E402

HELM, ROOT, BIN = sys.argv[1], Path(sys.argv[2]).resolve(), str(Path(sys.argv[3]).resolve())
MODE = {(): "generated", ("--tls",): "given", ("--plain",): "plain"}[tuple(sys.argv[4:])]
TLS = MODE == "given"
TLS_SECRET = "rehearsal-tls"
TLS_VALUES = {
    "generated": [],
    "given": [
        "--set", f"tls.peers.enabled=true,tls.peers.secretName={TLS_SECRET}",
        "--set", f"tls.http.enabled=true,tls.http.secretName={TLS_SECRET}",
        "--set", "admin.token.enabled=true",
    ],
    "plain": [
        "--set", "tls.peers.enabled=false,tls.http.enabled=false,admin.token.enabled=false",
        # Authorization: the broker plugin vouches for identities, the nodes enforce a policy.
        "--set", "config.auth.identity=broker,mqtt.statestorePlugin.enabled=true",
        "--set-file", f"authorization.policy={Path(__file__).resolve().parent / 'rehearsal-policy.toml'}",
    ],
}[MODE]
# The plugin the broker image would hold (scripts/check-helm.sh builds it): the rendered
# mosquitto.conf's path inside the image is rewritten to it.
PLUGIN = os.environ.get("STATESTORE_MOSQUITTO_PLUGIN", "")
EXISTING = {}  # Secrets the release expects to exist (kind, name) -> manifest
CHART = ROOT / "helm" / "statestore"
RELEASE, NS = "demo", "store"
REQUEST_TOPIC = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
TEST_USER = "statestore-helm-test"
T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class Failed(Exception):
    pass


def must(ok, what):
    if not ok:
        raise Failed(what)
    log(f"ok: {what}")


def wait_for(what, fn, timeout=60.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def render(*args, installed=None):
    """helm template; with `installed` (an earlier render), Secrets keep the installed data,
    as the chart's lookup of the existing Secret does on an upgrade (helm template cannot)."""
    cmd = [HELM, "template", RELEASE, str(CHART), "-n", NS, *TLS_VALUES, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise Failed(f"helm template {' '.join(args)}: {out.stderr}")
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    manifests = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    manifests.update(EXISTING)
    for key, doc in (installed or {}).items():
        if key[0] == "Secret" and key in manifests:
            manifests[key] = doc
    return manifests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Probes and the rehearsal's own status reads do not check the certificate (the kubelet does
# not either); the Jobs' `statestore cluster --ca` and the peers do.
UNVERIFIED = ssl.create_default_context()
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE


def http_get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=UNVERIFIED) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (OSError, http.client.HTTPException):  # e.g. plain HTTP to an HTTPS listener
        return None, ""


class World:
    """Names of the rendered release mapped to loopback ports and local directories."""

    def __init__(self, manifests, work):
        self.m = manifests
        self.work = work
        self.sts = next(d for (k, _), d in manifests.items() if k == "StatefulSet")
        self.name = self.sts["metadata"]["name"]
        self.headless = self.sts["spec"]["serviceName"]
        self.domain = "cluster.local"
        self.ports = {}  # (pod, container port) -> local port
        self.mqtt_port = free_port()
        self.pods = {}

    def local_port(self, pod, port):
        return self.ports.setdefault((pod, port), free_port())

    def pod_name(self, ordinal):
        return f"{self.name}-{ordinal}"

    def rewrite(self, text, pod=None):
        """Pod DNS names, Service names and this pod's 0.0.0.0 listeners -> 127.0.0.1 ports."""

        def dns(match):
            pod_name, port = match.group(1), int(match.group(2))
            return f"127.0.0.1:{self.local_port(pod_name, port)}"

        suffix = re.escape(f".{self.headless}.{NS}.svc.{self.domain}")
        text = re.sub(rf"({re.escape(self.name)}-\d+){suffix}:(\d+)", dns, text)
        text = text.replace(f"{RELEASE}-mqtt.{NS}.svc.{self.domain}:1883", f"127.0.0.1:{self.mqtt_port}")
        if pod is not None:
            text = re.sub(r"0\.0\.0\.0:(\d+)", lambda mt: f"127.0.0.1:{self.local_port(pod, int(mt.group(1)))}", text)
        return text

    def admin_endpoint(self, text):
        """The admin Service routes to a ready member: pick one."""
        for scheme in ("http", "https"):
            url = f"{scheme}://{self.name}.{NS}.svc.{self.domain}:"
            if url in text:
                break
        else:
            return text
        port = int(text.split(url, 1)[1].split("/")[0])
        for pod in self.pods.values():
            if pod.running() and pod.ready():
                return text.replace(f"{url}{port}", f"{scheme}://127.0.0.1:{self.local_port(pod.name, port)}")
        raise Failed("no ready member behind the admin Service")


class Pod:
    """One pod of a rendered workload, played as local processes."""

    def __init__(self, world, name, pod_spec, manifests, pvcs=()):
        self.w = world
        self.name = name
        self.spec = pod_spec
        self.m = manifests
        self.root = world.work / "pods" / name
        self.pvcs = set(pvcs)
        self.proc = None
        self.empty = set()
        self.logfile = world.work / "logs" / f"{name}.log"

    def mounts(self, container):
        """mountPath -> local directory of its volume (one directory per volume, shared by
        the pod's containers; an emptyDir lives as long as this pod, a PVC longer)."""
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        out = {}
        for vm in container.get("volumeMounts", []):
            name = vm["name"]
            if name in self.pvcs:
                local = self.w.work / "pvc" / f"{name}-{self.name}"
                local.mkdir(parents=True, exist_ok=True)
            else:
                local = self.root / "volumes" / name
                vol = volumes[name]
                if "emptyDir" in vol:
                    if name not in self.empty:
                        shutil.rmtree(local, ignore_errors=True)
                        local.mkdir(parents=True)
                        self.empty.add(name)
                elif "configMap" in vol or "secret" in vol:
                    shutil.rmtree(local, ignore_errors=True)
                    local.mkdir(parents=True)
                    if "configMap" in vol:
                        data = self.m[("ConfigMap", vol["configMap"]["name"])]["data"]
                        for key, value in data.items():
                            (local / key).write_text(value)
                    else:
                        data = self.m[("Secret", vol["secret"]["secretName"])]["data"]
                        items = vol["secret"].get("items") or [{"key": k, "path": k} for k in data]
                        for item in items:
                            (local / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
                else:
                    raise Failed(f"{self.name}: volume {name} of an unknown kind")
            out[vm["mountPath"]] = local
        # ConfigMap files name addresses and mount paths: rewrite them like the args.
        for vm in container.get("volumeMounts", []):
            if "configMap" in volumes.get(vm["name"], {}):
                for f in out[vm["mountPath"]].iterdir():
                    if f.suffix in (".toml", ".conf", ".sh"):
                        f.write_text(self.localize(f.read_text(), out))
        return out

    def localize(self, text, mounts):
        text = self.w.rewrite(text, self.name)
        if not mounts:
            return text
        # One pass, whole path components only (a local directory is under /tmp itself).
        paths = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
        return re.sub(rf"(?<![\w/.-])({paths})(?=/|\s|\"|$)", lambda m: str(mounts[m.group(1)]), text, flags=re.M)

    def command(self, container, mounts):
        env = {}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": self.name, "metadata.namespace": NS}[field]
        # The kubelet's $(VAR) expansion of command and args.
        expand = lambda s: re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), s)
        cmd = [expand(a) for a in container.get("command", [])] + [expand(a) for a in container.get("args", [])]
        cmd = [self.w.admin_endpoint(self.localize(a, mounts)) for a in cmd]
        env = {k: self.localize(v, mounts) for k, v in env.items()}
        return cmd, env

    def run_to_completion(self, container, entrypoint):
        mounts = self.mounts(container)
        cmd, env = self.command(container, mounts)
        if not container.get("command"):
            cmd = entrypoint + cmd
        if cmd[0].startswith("/") and not Path(cmd[0]).exists():
            cmd[0] = shutil.which(Path(cmd[0]).name) or cmd[0]
        log(f"{self.name}/{container['name']}: {' '.join(cmd)}")
        out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
        return out

    def start(self, container, entrypoint, extra_conf=None):
        mounts = self.mounts(container)
        if extra_conf:
            extra_conf(mounts)
        cmd, env = self.command(container, mounts)
        if not container.get("command"):
            cmd = entrypoint + cmd
        if cmd[0].startswith("/") and not Path(cmd[0]).exists():
            cmd[0] = shutil.which(Path(cmd[0]).name) or cmd[0]
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        log(f"start {self.name}: {' '.join(cmd)}")
        self.container = container
        self.proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=self.logfile.open("a"), stderr=subprocess.STDOUT
        )

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def ready(self):
        """The container's readiness probe (httpGet on a named port)."""
        probe = self.container.get("readinessProbe", {}).get("httpGet")
        if probe is None:
            return self.running()
        port = probe["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in self.container["ports"] if p["name"] == port)
        scheme = probe.get("scheme", "HTTP").lower()
        status, _ = http_get(f"{scheme}://127.0.0.1:{self.w.local_port(self.name, port)}{probe['path']}")
        return status == 200

    def scheme(self):
        return self.container["readinessProbe"]["httpGet"].get("scheme", "HTTP").lower()

    def http_port(self):
        return self.w.local_port(self.name, next(p["containerPort"] for p in self.container["ports"] if p["name"] == "http"))

    def status(self):
        code, body = http_get(f"{self.scheme()}://127.0.0.1:{self.http_port()}/admin/status")
        return json.loads(body) if code == 200 else None

    def kill(self, sig):
        if self.running():
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60) if self.proc else None

    def tail(self, n=15):
        if not self.logfile.exists():
            return ""
        lines = self.logfile.read_text(errors="replace").splitlines()[-n:]
        return "\n".join(f"    {self.name}| {line}" for line in lines)


def resp(*parts):
    out = f"*{len(parts)}\r\n"
    for p in parts:
        out += f"${len(p.encode())}\r\n{p}\r\n"
    return out.encode()


class Client:
    """Requests over MQTT 5 as the chart's test user, through the chart's broker and ACL."""

    def __init__(self, world, password):
        self.w = world
        self.password = password
        self.n = 0
        self.conn = None

    def request(self, *parts, timeout=30.0):
        self.n += 1
        correlation = f"{self.n:08d}".encode()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.conn is None:
                    self.conn = mqtt5.Client("127.0.0.1", self.w.mqtt_port, TEST_USER, self.password)
                    self.conn.subscribe(f"clients/{TEST_USER}/rehearsal")
                # The broker drops a request no member has subscribed to (during an election):
                # retry with the same correlation data, as the SDKs do.
                hlc = f"{int(time.time() * 1000)}:0:{TEST_USER}"
                answer = self.conn.request(
                    REQUEST_TOPIC, resp(*parts), f"clients/{TEST_USER}/rehearsal", correlation,
                    [("__ts", hlc), ("__srcId", TEST_USER), ("__protVer", "1.0")], timeout=1.0,
                )
            except OSError as e:
                log(f"MQTT connection: {e}; reconnecting")
                self.conn = None
                answer = None
            if answer is not None:
                props, payload = answer
                if ("__stat", "200") not in props:
                    raise Failed(f"{parts[0]} answered {props} {payload!r}")
                return payload
            if time.monotonic() > deadline:
                raise Failed(f"{parts[0]} {parts[1]} got no answer in {timeout:.0f} s")

    def set(self, key, value):
        reply = self.request("SET", key, value)
        must(reply == b"+OK\r\n", f"SET {key}={value} answered {reply!r}")

    def get(self, key, value):
        reply = self.request("GET", key)
        want = f"${len(value)}\r\n{value}\r\n".encode()
        must(reply == want, f"GET {key} = {value!r} (answered {reply!r})")


def sts_pod(world, manifests, ordinal):
    sts = next(d for (k, _), d in manifests.items() if k == "StatefulSet")
    pvcs = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    return Pod(world, world.pod_name(ordinal), sts["spec"]["template"]["spec"], manifests, pvcs)


def start_member(world, manifests, ordinal):
    pod = sts_pod(world, manifests, ordinal)
    (container,) = pod.spec["containers"]
    pod.start(container, [BIN])
    world.pods[pod.name] = pod
    return pod


def wait_ready(pods, timeout=60.0):
    def ready(pod):
        if not pod.running():
            raise Failed(f"{pod.name} exited with status {pod.proc.returncode}")
        return pod.ready()

    for pod in pods:
        wait_for(f"{pod.name} /readyz", lambda p=pod: ready(p), timeout)
    log(f"ready: {', '.join(p.name for p in pods)}")


def run_job(world, manifests, job, attempts=30):
    """The pod's containers in order (init containers, then the main one); under
    restartPolicy OnFailure a failed container is run again, as the kubelet does (1 s apart
    here instead of its exponential back-off)."""
    spec = job["spec"]["template"]["spec"]
    retry = spec.get("restartPolicy") == "OnFailure"
    pod = Pod(world, job["metadata"]["name"], spec, manifests)
    outputs = []
    for container in spec.get("initContainers", []) + spec["containers"]:
        for attempt in range(1, attempts + 1):
            out = pod.run_to_completion(container, [BIN])
            text = (out.stdout + out.stderr).strip().replace("\n", " ")[:200]
            if out.returncode == 0 or not retry or attempt == attempts:
                break
            log(f"  exit {out.returncode} ({text}); restarting the container")
            time.sleep(1)
        must(out.returncode == 0, f"{job['metadata']['name']}/{container['name']} exit 0 ({text})")
        outputs.append((container, out.stdout))
    return outputs


def membership_job(manifests, what):
    """The join Job or the remove hook (what: "join" or "remove") of a render."""
    (job,) = [d for (k, name), d in manifests.items() if k == "Job" and name.endswith(f"-{what}-r1")]
    return job


def voters(world):
    """The voters as the leader reports them: a membership change returns once the leader has
    it, and a follower applies it a moment later (CI once read [1, 2, 3] from a follower right
    after the join Job added 4 and 5). Any running pod's if none reports leading."""
    seen = None
    for pod in world.pods.values():
        if pod.running():
            st = pod.status()
            if st:
                if st.get("leader") is not None and st.get("leader") == st.get("id"):
                    return sorted(st["voters"])
                seen = seen or sorted(st["voters"])
    return seen


def leader(world):
    for pod in world.pods.values():
        if pod.running():
            st = pod.status()
            if st and st.get("leader"):
                return st["leader"]
    return None


def make_tls_secret(work):
    """A CA and one certificate (client and server) for every pod name, the admin Service and
    127.0.0.1, as a kubernetes.io/tls Secret with ca.crt (the layout cert-manager writes)."""
    d = work / "certs"
    d.mkdir(parents=True)
    name = f"{RELEASE}-statestore"
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-subj", "/CN=rehearsal CA", "-keyout", "ca.key", "-out", "ca.crt",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
        "-keyout", "tls.key", "-out", "tls.csr")
    (d / "ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName=DNS:*.{name}-headless.{NS}.svc.cluster.local,DNS:{name}.{NS}.svc.cluster.local,IP:127.0.0.1\n"
    )
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "ext", "-out", "tls.crt")
    data = {k: base64.b64encode((d / k).read_bytes()).decode() for k in ("ca.crt", "tls.crt", "tls.key")}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": {"name": TLS_SECRET}, "data": data}
    EXISTING[("Secret", TLS_SECRET)] = secret
    log(f"made Secret {TLS_SECRET}: CA and a certificate for *.{name}-headless..., {name}.{NS}.svc..., 127.0.0.1")
    return d


def generated_ca(world, m, work):
    """The CA of the Secret the chart generated, as a file."""
    secret = m[("Secret", f"{world.name}-tls")]
    path = work / "generated-ca.crt"
    path.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    log(f"the chart generated Secret {world.name}-tls (CA, certificate) and {world.name}-admin-token")
    return path


def plain_checks(world, m, client):
    """Plain HTTP, and the nodes started on 0.0.0.0 without a token only as told; the broker
    plugin and the policy in force."""
    pod = next(p for p in world.pods.values() if p.running())
    code, _ = http_get(f"http://127.0.0.1:{pod.http_port()}/livez")
    must(code == 200 and pod.scheme() == "http", f"{pod.name}: plain HTTP")
    cfg = m[("ConfigMap", f"{world.name}-config")]["data"][f"{pod.name}.toml"]
    must("allow_insecure_http = true" in cfg and "token_file" not in cfg, f"{pod.name}.toml: admin.allow_insecure_http, no token")
    must(("Secret", f"{world.name}-tls") not in m, "no TLS material generated")
    must("identity = \"broker\"" in cfg and "policy_file" in cfg, f"{pod.name}.toml: broker identity and the policy file")
    # The broker plugin vouches for the test user; the policy allows it rehearsal/* only.
    reply = client.request("GET", "elsewhere/k")
    must(reply == b"-ERR not authorized\r\n", f"a GET outside the policy is refused (answered {reply!r})")


def tls_checks(world, m, ca):
    """The members serve HTTPS only, and add-node without the chart's token is refused."""
    pod = next(p for p in world.pods.values() if p.running())
    port = pod.http_port()
    code, _ = http_get(f"http://127.0.0.1:{port}/livez")
    must(code is None and pod.scheme() == "https", f"{pod.name}: the HTTP port speaks HTTPS only (plain http: no answer)")
    base = [BIN, "cluster", "--endpoint", f"https://127.0.0.1:{port}", "--ca", str(ca)]
    out = subprocess.run(base + ["status"], capture_output=True, text=True, timeout=60)
    must(out.returncode == 0, f"statestore cluster --ca status against {pod.name} over HTTPS ({out.stderr.strip()[:200]})")
    out = subprocess.run(base + ["add-node", "--id", "9", "--raft", "127.0.0.1:9"], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "STATESTORE_ADMIN_TOKEN_FILE"})
    text = (out.stdout + out.stderr).strip().replace("\n", " ")
    must(out.returncode != 0 and "401" in text, f"add-node without the admin token refused ({text[:200]})")
    cfg = m[("ConfigMap", f"{world.name}-config")]["data"][f"{pod.name}.toml"]
    must("[cluster.tls]" in cfg and "[admin.tls]" in cfg and "token_file" in cfg, f"{pod.name}.toml has [cluster.tls], [admin.tls] and admin.token_file")


def main():
    work = Path(tempfile.mkdtemp(prefix="statestore-rehearsal-"))
    world = None
    broker = None
    try:
        certs = make_tls_secret(work) if TLS else None
        m3 = render()
        world = World(m3, work)
        log(f"rendered {len(m3)} objects; work dir {work}")

        # The broker: the subchart's Deployment (init container, then mosquitto).
        dep = m3[("Deployment", f"{RELEASE}-mqtt")]
        bspec = dep["spec"]["template"]["spec"]
        broker = Pod(world, f"{RELEASE}-mqtt", bspec, m3)
        (init,) = bspec["initContainers"]
        out = broker.run_to_completion(init, [])
        must(out.returncode == 0, f"broker init container: {out.stdout.strip()} {out.stderr.strip()}")
        (main_c,) = bspec["containers"]

        def listen_here(mounts):
            # The conf's listener port is the container port: give it its loopback port; a root
            # mosquitto would drop to the mosquitto user, who cannot read this directory.
            conf = next(p for p in mounts.values() if (p / "mosquitto.conf").exists()) / "mosquitto.conf"
            text = conf.read_text().replace("\nlistener 1883\n", f"\nlistener {world.mqtt_port} 127.0.0.1\n")
            image_plugin = re.search(r"^plugin (\S+)$", text, re.M)
            if image_plugin:
                must(Path(PLUGIN).is_file(), f"the broker loads {image_plugin.group(1)}: STATESTORE_MOSQUITTO_PLUGIN names the built plugin")
                text = text.replace(image_plugin.group(0), f"plugin {PLUGIN}")
            if os.geteuid() == 0:
                text += "user root\n"
            conf.write_text(text)

        broker.start(main_c, [], listen_here)
        wait_for("broker listening", lambda: socket.socket().connect_ex(("127.0.0.1", world.mqtt_port)) == 0, 10)
        log(f"broker up on 127.0.0.1:{world.mqtt_port}")

        secret = m3[("Secret", f"{RELEASE}-mqtt")]
        client = Client(world, base64.b64decode(secret["data"][TEST_USER]).decode())

        # 1-2. Install, SET and GET.
        pods = [start_member(world, m3, i) for i in range(3)]
        wait_ready(pods)
        client.set("rehearsal/k1", "v1")
        client.get("rehearsal/k1", "v1")
        if MODE == "given":
            tls_checks(world, m3, certs / "ca.crt")
        elif MODE == "generated":
            tls_checks(world, m3, generated_ca(world, m3, work))
        else:
            plain_checks(world, m3, client)

        # 3. kill -9 the leader; the others keep serving; restart it with its data.
        lead = wait_for("a leader", lambda: leader(world), 30)
        victim = world.pods[world.pod_name(lead - 1)]
        victim.kill(signal.SIGKILL)
        t = time.monotonic()
        log(f"killed -9 leader {victim.name} (node {lead})")
        client.get("rehearsal/k1", "v1")
        log(f"served again {time.monotonic() - t:.2f} s after the kill")
        client.set("rehearsal/k2", "v2")
        restarted = start_member(world, m3, lead - 1)
        wait_ready([restarted])

        # 4. SIGTERM another member: the quorum now needs the restarted one.
        other = next(p for p in world.pods.values() if p.running() and p is not restarted)
        grace = other.spec["terminationGracePeriodSeconds"]
        t = time.monotonic()
        code = other.kill(signal.SIGTERM)
        took = time.monotonic() - t
        must(code == 0 and took < grace, f"{other.name} stopped on SIGTERM with status {code} in {took:.1f} s (< grace {grace} s)")
        client.get("rehearsal/k1", "v1")
        client.get("rehearsal/k2", "v2")
        client.set("rehearsal/k3", "v3")
        again = start_member(world, m3, int(other.name.rsplit("-", 1)[1]))
        wait_ready([again])

        # 5. Scale to 5: the chart's render for replicas=5; the join Job's commands.
        m5 = render("--set", "replicas=5", installed=m3)
        sts3 = next(d for (k, _), d in m3.items() if k == "StatefulSet")
        sts5 = next(d for (k, _), d in m5.items() if k == "StatefulSet")
        cm = f"{world.name}-config"
        must(
            all(m5[("ConfigMap", cm)]["data"][f"{world.pod_name(i)}.toml"] == m3[("ConfigMap", cm)]["data"][f"{world.pod_name(i)}.toml"] for i in range(3))
            and sts5["spec"]["template"] == sts3["spec"]["template"],
            "scaling to 5 leaves the running pods' template and files unchanged (no roll)",
        )
        new = [start_member(world, m5, i) for i in (3, 4)]
        join = membership_job(m5, "join")
        run_job(world, m5, join)
        wait_ready(new)
        must(voters(world) == [1, 2, 3, 4, 5], f"voters {voters(world)} after the join Job")
        client.get("rehearsal/k3", "v3")

        # 6. Scale back to 3: the pre-upgrade hook, then the StatefulSet stops pods 4 and 3.
        mdown = render("--set", "membership.previousReplicas=5", installed=m3)
        hook = membership_job(mdown, "remove")
        must("pre-upgrade" in hook["metadata"]["annotations"]["helm.sh/hook"], "the scale-down's remove Job is a pre-upgrade hook")
        run_job(world, mdown, hook)
        must(voters(world) == [1, 2, 3], f"voters {voters(world)} after the remove hook")
        for pod in reversed(new):
            pod.kill(signal.SIGTERM)
        for key, value in (("rehearsal/k1", "v1"), ("rehearsal/k2", "v2"), ("rehearsal/k3", "v3")):
            client.get(key, value)

        # 7. Scale to 5 again: pods 3 and 4 on their kept volumes, added by the join Job.
        new = [start_member(world, m5, i) for i in (3, 4)]
        run_job(world, m5, join)
        wait_ready(new)
        must(voters(world) == [1, 2, 3, 4, 5], f"voters {voters(world)} after scaling to 5 again")
        client.set("rehearsal/k4", "v4")

        # 8. helm rollback to revision 1 (replicas 3): helm renders nothing and runs the hooks
        # stored with that revision, here its remove Job (pre-rollback only: no upgrade ran it).
        back = membership_job(m3, "remove")
        must(back["metadata"]["annotations"]["helm.sh/hook"] == "pre-rollback", "revision 1 stored a pre-rollback remove Job")
        run_job(world, m3, back)
        must(voters(world) == [1, 2, 3], f"voters {voters(world)} after revision 1's pre-rollback hook")
        for pod in reversed(new):
            pod.kill(signal.SIGTERM)
        for key, value in (("rehearsal/k1", "v1"), ("rehearsal/k3", "v3"), ("rehearsal/k4", "v4")):
            client.get(key, value)

        # 9. The helm test pod, when this binary has the kv client.
        test = next(d for (k, _), d in m3.items() if k == "Pod")
        has_kv = subprocess.run([BIN, "kv", "--help"], capture_output=True).returncode == 0
        if has_kv:
            steps = run_job(world, m3, {"metadata": test["metadata"], "spec": {"template": {"spec": test["spec"]}}})
            (set_c, _), (_, got), _ = steps
            must(got in (set_c["args"][-1], set_c["args"][-1] + "\n"), f"helm test pod: kv get printed the value kv set wrote ({got!r})")
        else:
            log("SKIP helm test pod: this statestore binary has no `kv` subcommand yet")

        what = {"generated": "the chart's defaults (generated TLS and token)", "given": "given TLS Secrets", "plain": "TLS and the token off"}[MODE]
        log(f"rehearsal with {what} passed ({client.n} MQTT requests)")
        return 0
    except (Failed, subprocess.TimeoutExpired) as e:
        print(f"FAIL {e}", flush=True)
        if world:
            for pod in list(world.pods.values()) + ([broker] if broker else []):
                print(pod.tail())
        return 1
    finally:
        if world:
            for pod in list(world.pods.values()) + ([broker] if broker else []):
                if pod.running():
                    pod.proc.terminate()
                    try:
                        pod.proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        pod.proc.kill()
                        pod.proc.wait()
        if os.environ.get("KEEP") == "1":
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
