"""A small Kubernetes API server on loopback for tests: real HTTP, the real API's paths, status codes
and JSON shapes for the few calls greengpu makes. Not a mock: it keeps objects and answers from them.

- GET /api/v1/pods (fieldSelector spec.nodeName=, status.phase=), GET /api/v1/nodes, GET /api/v1/nodes/N
- PATCH /api/v1/nodes/N: strategic-merge or merge patch (a JSON patch must be a list: 400 otherwise);
  `conflicts` answers the next PATCHes with 409 as when another writer changed the node first
- POST /api/v1/namespaces/NS/pods/P/eviction: 201 and the pod is gone; 429 when a
  PodDisruptionBudget selecting the pod allows no disruption; 404 for an unknown pod
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def pod(name: str, uid: str, node: str, namespace: str = "default", annotations: dict[str, str] | None = None,
        gpus: int = 1, phase: str = "Running", labels: dict[str, str] | None = None,
        daemonset: bool = False) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {},
                                "labels": labels or {}, "resourceVersion": "1"}
    if daemonset:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d",
                                        "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def node(name: str, ready: bool = True) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": f"uid-{name}", "annotations": {}, "labels": {}, "resourceVersion": "1"},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


class FakeKube:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pdbs: list[dict[str, Any]] = []
        """{"selector": {label: value}, "disruptions_allowed": int}"""
        self.conflicts = 0
        self.requests: list[tuple[str, str]] = []
        self.patch_types: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"null")

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("GET", self.path))
                with fake._lock:
                    if url.path == "/api/v1/pods":
                        selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                        items = [p for p in fake.pods if _matches(p, selector)]
                        self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                         "items": items})
                    elif url.path == "/api/v1/nodes":
                        self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                         "items": list(fake.nodes.values())})
                    elif url.path.startswith("/api/v1/nodes/"):
                        name = url.path.rsplit("/", 1)[1]
                        if name in fake.nodes:
                            self._send(200, fake.nodes[name])
                        else:
                            self._send(404, status(404, "NotFound", f'nodes "{name}" not found'))
                    else:
                        self._send(404, status(404, "NotFound", "the server could not find the requested resource"))

            def do_PATCH(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("PATCH", self.path))
                content_type = self.headers.get("Content-Type", "")
                fake.patch_types.append(content_type)
                body = self._body()
                with fake._lock:
                    name = url.path.rsplit("/", 1)[1]
                    if not url.path.startswith("/api/v1/nodes/") or name not in fake.nodes:
                        self._send(404, status(404, "NotFound", f'nodes "{name}" not found'))
                        return
                    if content_type.startswith("application/json-patch+json") and not isinstance(body, list):
                        self._send(400, status(400, "BadRequest", "json: cannot unmarshal object into Go value "
                                                                  "of type jsonpatch.Patch"))
                        return
                    if fake.conflicts > 0:
                        fake.conflicts -= 1
                        self._send(409, status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": '
                                                                "the object has been modified; please apply your "
                                                                "changes to the latest version and try again"))
                        return
                    _merge(fake.nodes[name], body)
                    version = int(fake.nodes[name]["metadata"]["resourceVersion"]) + 1
                    fake.nodes[name]["metadata"]["resourceVersion"] = str(version)
                    self._send(200, fake.nodes[name])

            def do_POST(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("POST", self.path))
                parts = url.path.strip("/").split("/")
                self._body()
                # /api/v1/namespaces/NS/pods/NAME/eviction
                if len(parts) != 7 or parts[2] != "namespaces" or parts[4] != "pods" or parts[6] != "eviction":
                    self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                    return
                namespace, name = parts[3], parts[5]
                with fake._lock:
                    target = next((p for p in fake.pods if p["metadata"]["name"] == name
                                   and p["metadata"]["namespace"] == namespace), None)
                    if target is None:
                        self._send(404, status(404, "NotFound", f'pods "{name}" not found'))
                        return
                    for budget in fake.pdbs:
                        labels = target["metadata"].get("labels", {})
                        if all(labels.get(k) == v for k, v in budget["selector"].items()):
                            if budget["disruptions_allowed"] <= 0:
                                self._send(429, status(429, "TooManyRequests", "Cannot evict pod as it would "
                                                                               "violate the pod's disruption budget."))
                                return
                            budget["disruptions_allowed"] -= 1
                    fake.pods.remove(target)
                self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                 "code": 201})

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeKube:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge-patch semantics: mappings merge, null deletes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _matches(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key == "spec.nodeName" and obj["spec"].get("nodeName", "") != value:
            return False
        if key == "status.phase" and obj["status"].get("phase") != value:
            return False
    return True
