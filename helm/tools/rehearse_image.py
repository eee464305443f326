#!/usr/bin/env python3
"""A rehearsal of the chart with the real images, as podman containers, without Kubernetes.

    rehearse_image.py HELM REPO_ROOT IMAGE MOSQUITTO_IMAGE DEBUG_IMAGE

It renders the chart with helm (its defaults: peer TLS, HTTPS and the admin token on, the
material generated; image = IMAGE, the broker's image = MOSQUITTO_IMAGE, the Dockerfile's
Debian Mosquitto with the statestore plugin, since eclipse-mosquitto cannot be pulled here,
with mqtt.statestorePlugin on and config.auth.identity = broker: a request the plugin did not
vouch for gets no reply) and runs each rendered pod
as containers of those images: the container's args and command exactly as rendered (the
kubelet's $(VAR) expansion done from its env), each volume where the pod mounts it (ConfigMaps
and Secrets as read-only directories with the Secret's mode and the pod's fsGroup, emptyDirs
as directories, each member's PersistentVolumeClaim as a podman named volume of its own), and
the securityContext as podman flags: readOnlyRootFilesystem -> --read-only (with no tmpfs of
podman's own: only the pod's volumes are writable), runAsUser/runAsGroup -> --user, fsGroup ->
--group-add, capabilities drop ALL -> --cap-drop ALL, allowPrivilegeEscalation false ->
no-new-privileges. Nothing is rewritten: every pod gets an address of its own on a podman
bridge network, and /etc/hosts entries (--add-host) stand in for the cluster's DNS: each
member's name under the headless Service, the broker's Service, and the admin Service (a ready
member, chosen when a Job or test pod starts). The readiness probe is the rendered httpGet
(/readyz, HTTPS) sent to the pod's address.

  1. the broker pod: its init container (the subchart's init.sh), then mosquitto, which must
     load the plugin
  2. 3 members; each passes /readyz; every line each writes is a JSON object (the chart
     sets telemetry.log_format = "json")
  3. scripts/kind-failover-writer.yaml's writer Job in DEBUG_IMAGE (the same binary with
     bash): `statestore kv set w/<i> <i>` every 100 ms, each given 1 s, printing ACK <i> <ms>
     per acknowledged write
  4. podman kill (SIGKILL) the leader's container: from the last write acknowledged before
     the kill, the next ones must follow within 2 s each (the longest gap between two
     acknowledgements, and the first one after the kill, are printed; the times are the
     writer's, taken after `statestore kv` returned, and the kill's, taken before podman kill
     was called: both err on the long side)
  5. the killed pod again, from its volume (it initialises no new cluster and holds at least
     the keys acknowledged before the kill); then SIGTERM another member, so the restarted one
     must be in the quorum, and every acknowledged write reads back (the writer's checker)
  6. scale to 5: pods 3 and 4 (join = true) and the join Job's containers, in order, retried
     under restartPolicy OnFailure, until voters are 1..5
  7. scale back to 3: the pre-upgrade remove hook's containers, voters 1..3, pods 4 and 3
     stopped (SIGTERM); every acknowledged write reads back
  8. the `helm test` pod's containers (statestore kv set, get, del)

Exits 1 on the first failure, printing the containers' log tails. Removes its containers
(with the anonymous volumes the image's VOLUME gives a Job container), volumes and network at
the end (and those a killed earlier run left: all carry the label
statestore-rehearsal), and its directory unless KEEP=1. REHEARSAL_SUBNET (default
10.89.231.0/24) is the network's; addresses .5 (broker) and .10-.14 (members) are fixed, Jobs
get theirs from .128 up.
"""

import base64
import datetime
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

HELM, ROOT = sys.argv[1], Path(sys.argv[2]).resolve()
IMAGE, MOSQUITTO_IMAGE, DEBUG_IMAGE = sys.argv[3:6]
CHART = ROOT / "helm" / "statestore"
RELEASE, NS, DOMAIN = "demo", "store", "cluster.local"
LABEL = "statestore-rehearsal"
NETWORK = "statestore-rehearsal"
SUBNET = ipaddress.ip_network(os.environ.get("REHEARSAL_SUBNET", "10.89.231.0/24"))
BROKER_IP = str(SUBNET[5])
# The writer Job's MQTT users, as scripts/kind-failover.sh installs the chart.
USERS = [{"name": "writer"}] + [{"name": f"checker-{n}"} for n in range(1, 5)]
FAILOVER_LIMIT_MS = 2000
T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class Failed(Exception):
    pass


def must(ok, what):
    if not ok:
        raise Failed(what)
    log(f"ok: {what}")


def wait_for(what, fn, timeout=60.0, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def podman(*args, check=True, timeout=300):
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise Failed(f"podman {' '.join(args[:3])} ...: {out.stderr.strip()[-600:]}")
    return out


def image_values(image, prefix):
    repo, tag = image.rsplit(":", 1)
    return ["--set", f"{prefix}.repository={repo},{prefix}.tag={tag}"]


def render(*args, installed=None):
    """helm template of the chart's defaults; with `installed` (an earlier render), Secrets
    keep the installed data, as the chart's lookup of the existing Secret does on an upgrade."""
    cmd = [HELM, "template", RELEASE, str(CHART), "-n", NS, *image_values(IMAGE, "image"),
           *image_values(MOSQUITTO_IMAGE, "mqtt.image"), "--set-json", f"mqtt.auth.users={json.dumps(USERS)}",
           # The broker image holds the statestore plugin: it vouches for each request's identity.
           "--set", "mqtt.statestorePlugin.enabled=true,config.auth.identity=broker", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise Failed(f"helm template {' '.join(args)}: {out.stderr}")
    manifests = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    for key, doc in (installed or {}).items():
        if key[0] == "Secret" and key in manifests:
            manifests[key] = doc
    return manifests


UNVERIFIED = ssl.create_default_context()
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE


def http_get(url, timeout=2.0):
    """As the kubelet's httpGet probe: the certificate is not checked."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=UNVERIFIED) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


class Release:
    """The rendered release's names, the pods' addresses and the containers started."""

    def __init__(self, manifests, work):
        self.work = work
        sts = statefulset(manifests)
        self.name = sts["metadata"]["name"]
        self.headless = sts["spec"]["serviceName"]
        self.members = {}  # ordinal -> Pod of a running (or killed) member
        self.pods = []  # every Pod played, for the log tails on a failure

    def pod_name(self, ordinal):
        return f"{self.name}-{ordinal}"

    def member_ip(self, ordinal):
        return str(SUBNET[10 + ordinal])

    def hosts(self):
        """The cluster DNS names a pod resolves: every member (up to 5) and the broker."""
        names = {f"{self.pod_name(i)}.{self.headless}.{NS}.svc.{DOMAIN}": self.member_ip(i) for i in range(5)}
        names[f"{RELEASE}-mqtt.{NS}.svc.{DOMAIN}"] = BROKER_IP
        return names

    def admin_service(self):
        """The admin Service routes to a ready member."""
        for ordinal, pod in sorted(self.members.items()):
            if pod.running() and pod.ready():
                return {f"{self.name}.{NS}.svc.{DOMAIN}": self.member_ip(ordinal)}
        raise Failed("no ready member behind the admin Service")

    def status(self):
        for pod in self.members.values():
            if pod.running():
                code, body = pod.probe_get("/admin/status")
                if code == 200:
                    return json.loads(body)
        return None


def statefulset(manifests):
    return next(d for (k, _), d in manifests.items() if k == "StatefulSet")


class Pod:
    """One rendered pod: its volumes as directories and named volumes, its containers as podman
    containers named <pod>.<container>, on the rehearsal network."""

    def __init__(self, rel, name, spec, manifests, ip=None, claims=()):
        self.rel = rel
        self.name = name
        self.spec = spec
        self.m = manifests
        self.ip = ip
        self.claims = set(claims)
        self.root = rel.work / "pods" / name
        self.main = None  # the long-running container's spec and name
        self.empty_dirs = {}
        rel.pods.append(self)

    def security(self, container):
        """podman flags for the pod's and the container's securityContext."""
        pod_sc = self.spec.get("securityContext") or {}
        sc = {**pod_sc, **(container.get("securityContext") or {})}
        flags = []
        if sc.get("readOnlyRootFilesystem"):
            flags += ["--read-only", "--read-only-tmpfs=false"]
        if "runAsUser" in sc:
            if sc.get("runAsNonRoot") and sc["runAsUser"] == 0:
                raise Failed(f"{self.name}: runAsNonRoot with runAsUser 0")
            flags += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
        if "fsGroup" in pod_sc:
            flags += ["--group-add", str(pod_sc["fsGroup"])]
        if "ALL" in (sc.get("capabilities") or {}).get("drop", []):
            flags += ["--cap-drop", "ALL"]
        if sc.get("allowPrivilegeEscalation") is False:
            flags += ["--security-opt", "no-new-privileges"]
        return flags

    def volume_flags(self, container):
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup", 0)
        flags = []
        for vm in container.get("volumeMounts", []):
            name, path = vm["name"], vm["mountPath"]
            ro = ":ro" if vm.get("readOnly") else ""
            if name in self.claims:
                claim = f"{name}-{self.name}"  # the StatefulSet's PVC name
                if podman("volume", "exists", claim, check=False).returncode != 0:
                    podman("volume", "create", "--label", LABEL, claim)
                flags += ["-v", f"{claim}:{path}{ro}"]
                continue
            vol = volumes[name]
            local = self.root / "volumes" / name
            if "emptyDir" in vol:
                if name not in self.empty_dirs:  # one per pod, shared by its containers
                    shutil.rmtree(local, ignore_errors=True)
                    local.mkdir(parents=True)
                    local.chmod(0o777)
                    self.empty_dirs[name] = local
            elif "configMap" in vol:
                shutil.rmtree(local, ignore_errors=True)
                local.mkdir(parents=True)
                for key, value in self.m[("ConfigMap", vol["configMap"]["name"])]["data"].items():
                    (local / key).write_text(value)
                    (local / key).chmod(0o644)
                local.chmod(0o755)
            elif "secret" in vol:
                shutil.rmtree(local, ignore_errors=True)
                local.mkdir(parents=True)
                data = self.m[("Secret", vol["secret"]["secretName"])]["data"]
                items = vol["secret"].get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    f = local / item["path"]
                    f.write_bytes(base64.b64decode(data[item["key"]]))
                    os.chown(f, 0, fs_group)
                    f.chmod(vol["secret"].get("defaultMode", 0o644))
                local.chmod(0o755)
            else:
                raise Failed(f"{self.name}: volume {name} of an unknown kind")
            flags += ["-v", f"{local}:{path}{ro}"]
        return flags

    def podman_args(self, container, cname, hosts):
        env = {}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": self.name, "metadata.namespace": NS}[field]
        expand = lambda s: re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), s)
        args = ["--name", cname, "--label", LABEL, "--network", NETWORK, "--hostname", self.name]
        if self.ip:
            args += ["--ip", self.ip]
        for host, ip in hosts.items():
            args += ["--add-host", f"{host}:{ip}"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        args += self.security(container) + self.volume_flags(container)
        if container.get("command"):
            args += ["--entrypoint", json.dumps([expand(a) for a in container["command"]])]
        args += [container["image"]] + [expand(a) for a in container.get("args", [])]
        return args

    def run_to_completion(self, container, hosts):
        cname = f"{self.name}.{container['name']}"
        podman("rm", "--force", "--volumes", cname, check=False)
        args = self.podman_args(container, cname, hosts)
        log(f"{cname}: {' '.join(container.get('command', []) + container.get('args', []))}")
        out = podman("run", *args, check=False, timeout=180)
        podman("rm", "--force", "--volumes", cname, check=False)
        return out

    def start(self, container, hosts):
        cname = f"{self.name}.{container['name']}"
        podman("rm", "--force", "--volumes", cname, check=False)
        args = self.podman_args(container, cname, hosts)
        self.main = (container, cname)
        log(f"start {cname} ({self.ip or 'an address of podman'}): podman run {' '.join(self.security(container))} "
            f"{container['image']} {' '.join(container.get('command', []) + container.get('args', []))[:300]}")
        podman("run", "--detach", *args)

    def inspect(self, fmt):
        return podman("inspect", "--format", fmt, self.main[1], check=False).stdout.strip()

    def running(self):
        return self.main is not None and self.inspect("{{.State.Running}}") == "true"

    def probe_get(self, path):
        container = self.main[0]
        probe = container["readinessProbe"]["httpGet"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["port"])
        return http_get(f"{probe.get('scheme', 'HTTP').lower()}://{self.ip}:{port}{path}")

    def ready(self):
        """The rendered readiness probe: httpGet, or tcpSocket (the broker)."""
        container = self.main[0]
        probe = container["readinessProbe"]
        if "tcpSocket" in probe:
            port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["tcpSocket"]["port"])
            with socket.socket() as s:
                s.settimeout(1)
                return s.connect_ex((self.ip, port)) == 0
        code, _ = self.probe_get(probe["httpGet"]["path"])
        return code == 200

    def logs(self):
        out = podman("logs", self.main[1], check=False)
        return out.stdout + out.stderr

    def tail(self, n=15):
        if self.main is None:
            return ""
        return "\n".join(f"    {self.name}| {line}" for line in self.logs().splitlines()[-n:])


def start_member(rel, manifests, ordinal):
    sts = statefulset(manifests)
    claims = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    pod = Pod(rel, rel.pod_name(ordinal), sts["spec"]["template"]["spec"], manifests, rel.member_ip(ordinal), claims)
    (container,) = pod.spec["containers"]
    pod.start(container, rel.hosts())
    rel.members[ordinal] = pod
    return pod


def wait_ready(pods, timeout=90.0):
    t = time.monotonic()

    def ready(pod):
        if not pod.running():
            raise Failed(f"{pod.name} exited: {pod.inspect('{{.State.ExitCode}}')}")
        return pod.ready()

    for pod in pods:
        wait_for(f"{pod.name} readiness probe", lambda p=pod: ready(p), timeout)
    log(f"ready: {', '.join(p.name for p in pods)} ({time.monotonic() - t:.1f} s)")


def run_job(rel, manifests, job, attempts=30):
    """The Job's containers in order (init containers, then the main one), each a container of
    the image; under restartPolicy OnFailure a failed one runs again (1 s apart)."""
    spec = job["spec"]["template"]["spec"]
    retry = spec.get("restartPolicy") == "OnFailure"
    pod = Pod(rel, job["metadata"]["name"], spec, manifests)
    outputs = []
    for container in spec.get("initContainers", []) + spec["containers"]:
        for attempt in range(1, attempts + 1):
            out = pod.run_to_completion(container, {**rel.hosts(), **rel.admin_service()})
            text = (out.stdout + out.stderr).strip().replace("\n", " ")[:200]
            if out.returncode == 0 or not retry or attempt == attempts:
                break
            log(f"  exit {out.returncode} ({text}); restarting the container")
            time.sleep(1)
        must(out.returncode == 0, f"{job['metadata']['name']}/{container['name']} exit 0 ({text})")
        outputs.append((container, out.stdout))
    return outputs


def membership_job(manifests, what):
    (job,) = [d for (k, name), d in manifests.items() if k == "Job" and name.endswith(f"-{what}-r1")]
    return job


def voters(rel):
    st = rel.status()
    return sorted(st["voters"]) if st else None


class Writer:
    """scripts/kind-failover-writer.yaml's Job, its placeholders filled as kind-failover.sh does,
    in the debug image."""

    def __init__(self, rel, manifests):
        text = (ROOT / "scripts" / "kind-failover-writer.yaml").read_text()
        for key, value in {"@REL@": RELEASE, "@NS@": NS, "@CONTROL_PLANE@": "{}", "@TOLERATE@": "[]"}.items():
            text = text.replace(key, value)
        job = yaml.safe_load(text)
        spec = job["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        container["image"] = DEBUG_IMAGE
        self.pod = Pod(rel, "writer", spec, manifests)
        self.pod.start(container, rel.hosts())

    def acks(self):
        """(i, epoch ms) of every acknowledged write so far."""
        return [(int(i), int(t)) for i, t in re.findall(r"^ACK (\d+) (\d+)$", self.pod.logs(), re.M)]

    def check(self):
        """The Job's checker: every acknowledged key read back; (checked, missing)."""
        out = podman("exec", self.pod.main[1], "/tmp/check", timeout=300)
        checked, missing = out.stdout.split()
        return int(checked), int(missing)


def json_logs(pod):
    """Every line the member wrote is a JSON object with a timestamp, a level and fields."""
    lines = [line for line in pod.logs().splitlines() if line.strip()]
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            raise Failed(f"{pod.name}: a log line that is not JSON: {line[:200]}")
        if not all(k in event for k in ("timestamp", "level", "fields")):
            raise Failed(f"{pod.name}: a JSON log line without timestamp, level or fields: {line[:200]}")
    return len(lines)


def leader_serving_since(rel, victim, after_ms):
    """From the surviving members' JSON logs: when one of them began serving as the leader
    after `after_ms` (epoch ms), or None."""
    times = []
    for pod in rel.members.values():
        if pod is victim:
            continue
        for line in pod.logs().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("fields", {}).get("message") == "leader: serving requests":
                ms = int(datetime.datetime.fromisoformat(event["timestamp"]).timestamp() * 1000)
                if ms > after_ms:
                    times.append(ms)
    return min(times, default=None)


def cleanup():
    """Removes the containers, volumes and network of this (or an earlier, killed) run."""
    containers = podman("ps", "--all", "--quiet", "--filter", f"label={LABEL}", check=False).stdout.split()
    if containers:
        podman("rm", "--force", "--volumes", "--time", "0", *containers, check=False)
    volumes = podman("volume", "ls", "--quiet", "--filter", f"label={LABEL}", check=False).stdout.split()
    if volumes:
        podman("volume", "rm", "--force", *volumes, check=False)
    podman("network", "rm", "--force", NETWORK, check=False)


def main():
    work = Path(tempfile.mkdtemp(prefix="statestore-image-rehearsal-"))
    work.chmod(0o755)
    rel = None
    try:
        cleanup()
        # Static addresses below .128, podman's own from .128 up.
        podman("network", "create", "--label", LABEL, "--disable-dns", "--subnet", str(SUBNET),
               "--ip-range", str(list(SUBNET.subnets(new_prefix=SUBNET.prefixlen + 1))[1]), NETWORK)
        m3 = render()
        rel = Release(m3, work)
        log(f"rendered {len(m3)} objects; network {NETWORK} {SUBNET}; work dir {work}")

        # 1. The broker pod.
        dep = m3[("Deployment", f"{RELEASE}-mqtt")]
        broker = Pod(rel, f"{RELEASE}-mqtt", dep["spec"]["template"]["spec"], m3, BROKER_IP)
        (init,) = broker.spec["initContainers"]
        out = broker.run_to_completion(init, rel.hosts())
        must(out.returncode == 0, f"broker init container in {init['image']}: {(out.stdout + out.stderr).strip()}")
        (mosquitto,) = broker.spec["containers"]
        broker.start(mosquitto, rel.hosts())
        wait_for("the broker's readiness (tcpSocket)", broker.ready, 30)
        plugin = re.search(r"^plugin (\S+)$", m3[("ConfigMap", f"{RELEASE}-mqtt")]["data"]["mosquitto.conf"], re.M)
        # Mosquitto's log reaches stdout block-buffered, late: look at the process's mappings.
        maps = podman("exec", broker.main[1], "cat", "/proc/1/maps", check=False).stdout
        must(plugin is not None and plugin.group(1) in maps,
             f"the broker process has the statestore plugin loaded from its image ({plugin and plugin.group(1)})")

        # 2. Three members.
        t = time.monotonic()
        members = [start_member(rel, m3, i) for i in range(3)]
        (container,) = members[0].spec["containers"]
        flags = members[0].podman_args(container, "x", {})
        must("--read-only" in flags and flags[flags.index("--user") + 1] == "65532:65532",
             "the members run --read-only --user 65532:65532 (the chart's securityContext)")
        wait_ready(members)
        log(f"3 members ready {time.monotonic() - t:.1f} s after their containers were started")
        must(voters(rel) == [1, 2, 3], f"voters {voters(rel)}")

        # 3. The writer.
        writer = Writer(rel, m3)
        wait_for("20 acknowledged writes", lambda: len(writer.acks()) >= 20, 60)
        log(f"writer: {len(writer.acks())} writes acknowledged")

        # 4. podman kill the leader's container.
        lead = wait_for("a leader", lambda: (rel.status() or {}).get("leader"), 30)
        victim = rel.members[lead - 1]
        before = len(writer.acks())
        kill_ms = int(time.time() * 1000)
        podman("kill", victim.main[1])
        log(f"podman kill {victim.main[1]} (node {lead}, the leader)")
        wait_for("an acknowledged write after the kill", lambda: any(ms > kill_ms for _, ms in writer.acks()), 30, 0.05)
        serving = wait_for("a new leader serving", lambda: leader_serving_since(rel, victim, kill_ms), 10)
        wait_for("10 more acknowledged writes", lambda: len(writer.acks()) >= before + 10, 60)
        acks = writer.acks()
        first_after = min(ms for _, ms in acks if ms > kill_ms) - kill_ms
        last_before = max((ms for _, ms in acks if ms <= kill_ms), default=kill_ms)
        stamps = [last_before] + sorted(ms for _, ms in acks if ms > kill_ms)
        longest = max(b - a for a, b in zip(stamps, stamps[1:]))
        code = victim.inspect("{{.State.ExitCode}}")
        log(f"failover: a new leader served {serving - kill_ms} ms after the kill (its log); the first write was "
            f"acknowledged {first_after} ms after the kill; the longest gap between acknowledged writes around "
            f"it {longest} ms (the leader's container exited {code})")
        must(code == "137", "the killed container died of SIGKILL (exit 137)")
        must(longest <= FAILOVER_LIMIT_MS,
             f"writes kept being acknowledged: no gap over {FAILOVER_LIMIT_MS} ms across the kill (longest {longest} ms)")

        # 5. The killed pod again, from its volume; then the quorum must include it.
        acked_before = sum(1 for _, ms in acks if ms <= kill_ms)
        restarted = start_member(rel, m3, lead - 1)
        wait_ready([restarted])
        code, body = restarted.probe_get("/admin/status")
        keys = json.loads(body)["keys"] if code == 200 else None
        must("initialised a new cluster" not in restarted.logs() and keys is not None and keys >= acked_before,
             f"{restarted.name} restarted from its volume (no new cluster initialised; {keys} keys, "
             f"{acked_before} writes were acknowledged before the kill)")
        other = next(p for i, p in sorted(rel.members.items()) if p is not restarted)
        grace = other.spec["terminationGracePeriodSeconds"]
        t = time.monotonic()
        podman("stop", "--time", str(grace), other.main[1], timeout=grace + 30)
        took = time.monotonic() - t
        code = other.inspect("{{.State.ExitCode}}")
        must(code == "0" and took < grace, f"{other.name} stopped on SIGTERM with status {code} in {took:.1f} s (< grace {grace} s)")
        n = len(writer.acks())
        wait_for("5 writes acknowledged by the restarted member's quorum", lambda: len(writer.acks()) >= n + 5, 60)
        checked, missing = writer.check()
        must(missing == 0, f"with {other.name} down: {checked} acknowledged writes read back, {missing} missing")
        again = start_member(rel, m3, int(other.name.rsplit("-", 1)[1]))
        wait_ready([again])

        # 6. Scale to 5: the render for replicas=5; pods 3 and 4; the join Job.
        m5 = render("--set", "replicas=5", installed=m3)
        new = [start_member(rel, m5, i) for i in (3, 4)]
        run_job(rel, m5, membership_job(m5, "join"))
        wait_ready(new)
        must(voters(rel) == [1, 2, 3, 4, 5], f"voters {voters(rel)} after the join Job")

        # 7. Scale back to 3: the pre-upgrade remove hook, then pods 4 and 3 stop.
        mdown = render("--set", "membership.previousReplicas=5", installed=m3)
        hook = membership_job(mdown, "remove")
        must("pre-upgrade" in hook["metadata"]["annotations"]["helm.sh/hook"], "the scale-down's remove Job is a pre-upgrade hook")
        run_job(rel, mdown, hook)
        must(voters(rel) == [1, 2, 3], f"voters {voters(rel)} after the remove hook")
        for pod in reversed(new):
            podman("stop", "--time", str(grace), pod.main[1], timeout=grace + 30)
            del rel.members[int(pod.name.rsplit("-", 1)[1])]
        n = len(writer.acks())
        wait_for("5 more acknowledged writes on 3 members", lambda: len(writer.acks()) >= n + 5, 60)
        checked, missing = writer.check()
        must(missing == 0, f"after scaling 3 -> 5 -> 3: {checked} acknowledged writes read back, {missing} missing")

        # 8. The helm test pod.
        test = next(d for (k, _), d in m3.items() if k == "Pod")
        steps = run_job(rel, m3, {"metadata": test["metadata"], "spec": {"template": {"spec": test["spec"]}}})
        (set_c, _), (_, got), _ = steps
        must(got in (set_c["args"][-1], set_c["args"][-1] + "\n"), f"helm test pod: kv get printed the value kv set wrote ({got!r})")

        for pod in rel.members.values():
            must(json_logs(pod) > 0, f"{pod.name}: {json_logs(pod)} log lines, each a JSON object")
        acks = writer.acks()
        log(f"image rehearsal passed: {len(acks)} writes acknowledged, every one read back; after podman kill "
            f"of the leader a new leader served in {serving - kill_ms} ms, the first write was acknowledged in "
            f"{first_after} ms, the longest gap between acknowledged writes was {longest} ms")
        return 0
    except (Failed, subprocess.TimeoutExpired) as e:
        print(f"FAIL {e}", flush=True)
        if rel:
            for pod in rel.pods:
                print(pod.tail())
        return 1
    finally:
        if os.environ.get("KEEP") == "1":
            print(f"kept {work} and the containers (label {LABEL})")
        else:
            cleanup()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
