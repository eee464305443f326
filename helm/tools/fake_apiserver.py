"""A stand-in Kubernetes API server for `helm template --dry-run=server`, so that the chart's
`lookup` calls can be tested offline (helm template alone makes lookup return nothing).

It answers only what helm asks while rendering: /version, the discovery documents of the
kinds the chart renders by default, and GETs of the objects it was given (everything else:
404, so every other lookup finds nothing). Use it with --disable-openapi-validation (it
serves no OpenAPI documents):

    with FakeApiServer({("apps/v1", "StatefulSet", "store", "demo-statestore"): sts}) as api:
        subprocess.run([helm, "template", ..., "--dry-run=server", "--is-upgrade",
                        "--disable-openapi-validation"], env={**os.environ, **api.env})
"""

import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

# (group/version, resource, kind, namespaced) of every kind the chart renders by default.
RESOURCES = [
    ("v1", "configmaps", "ConfigMap", True),
    ("v1", "namespaces", "Namespace", False),
    ("v1", "pods", "Pod", True),
    ("v1", "secrets", "Secret", True),
    ("v1", "serviceaccounts", "ServiceAccount", True),
    ("v1", "services", "Service", True),
    ("apps/v1", "deployments", "Deployment", True),
    ("apps/v1", "statefulsets", "StatefulSet", True),
    ("batch/v1", "jobs", "Job", True),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
]


def _discovery():
    docs = {
        "/version": {"major": "1", "minor": "30", "gitVersion": "v1.30.0", "platform": "linux/amd64"},
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    }
    groups = {}
    for gv, resource, kind, namespaced in RESOURCES:
        path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        doc = docs.setdefault(path, {"kind": "APIResourceList", "groupVersion": gv, "resources": []})
        doc["resources"].append({"name": resource, "singularName": "", "namespaced": namespaced, "kind": kind,
                                 "verbs": ["get", "list", "create", "update", "patch", "delete"]})
        if gv != "v1":
            group, version = gv.split("/")
            groups[group] = {"name": group, "versions": [{"groupVersion": gv, "version": version}],
                             "preferredVersion": {"groupVersion": gv, "version": version}}
    docs["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups.values())}
    return docs


class FakeApiServer:
    """objects: {(apiVersion, kind, namespace, name): manifest}."""

    def __init__(self, objects=None):
        docs = _discovery()
        for (api_version, kind, ns, name), obj in (objects or {}).items():
            (resource,) = [r for gv, r, k, _ in RESOURCES if gv == api_version and k == kind]
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            docs[f"{prefix}/namespaces/{ns}/{resource}/{name}"] = obj
        self.requests = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler):  # noqa: N805
                path = urlparse(handler.path).path
                self.requests.append(path)
                code, body = (200, docs[path]) if path in docs else (
                    404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
                data = json.dumps(body).encode()
                handler.send_response(code)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)

            def log_message(handler, *args):  # noqa: N805
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.dir = tempfile.TemporaryDirectory(prefix="statestore-fakeapi-")
        kubeconfig = Path(self.dir.name) / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.server.server_port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        self.env = {"KUBECONFIG": str(kubeconfig)}

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.dir.cleanup()
