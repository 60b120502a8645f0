"""A small Kubernetes API server on loopback for tests: real HTTP, the real API's paths, status codes
and JSON shapes for the few calls greengpu makes. Not a mock: it keeps objects and answers from them,
and refuses what the real API server refuses.

- GET /api/v1/pods with a fieldSelector of the fields the API server supports for pods (`=`, `==`,
  `!=`); any other field is refused with its 400 ("field label not supported: ...").
- GET /api/v1/namespaces/NS/pods/P, GET /api/v1/nodes, GET /api/v1/nodes/N
- PATCH /api/v1/nodes/N: strategic-merge or merge patch (a JSON patch must be a list: 400 otherwise);
  `conflicts` answers the next PATCHes with 409 as when another writer changed the node first;
  `server_errors` answers the next calls of any kind with 500.
- POST /api/v1/namespaces/NS/pods/P/eviction: the body must be a policy/v1 Eviction naming the pod
  (400 otherwise, as the API server says). 201, and the pod terminates: it gets a deletionTimestamp
  and is gone `termination_s` later (its grace period). 429 with the API server's Status body
  (cause DisruptionBudget) when a PodDisruptionBudget selecting the pod allows no disruption; 404 for
  an unknown pod.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


POD_FIELDS = frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
                        "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                        "status.podIP", "status.podIPs", "status.nominatedNodeName"})
"""The pod fields kube-apiserver accepts in a field selector (pkg/registry/core/pod/strategy.go)."""


def pod(name: str, uid: str, node: str, namespace: str = "default", annotations: dict[str, str] | None = None,
        gpus: int = 1, phase: str = "Running", labels: dict[str, str] | None = None,
        daemonset: bool = False, controller: str | None = "ReplicaSet", empty_dir: bool = False) -> dict[str, Any]:
    """A pod; `controller` None makes a bare pod (no owner recreates it)."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {},
                                "labels": labels or {}, "resourceVersion": "1"}
    owner = "DaemonSet" if daemonset else controller
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner",
                                        "uid": f"owner-{uid}", "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": limits}}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def node(name: str, ready: bool = True, labels: dict[str, str] | None = None,
         capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A node; `labels` and `capacity` as the GPU Operator publishes them (allocatable = capacity)."""
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": f"uid-{name}", "annotations": {}, "labels": dict(labels or {}),
                         "resourceVersion": "1"},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}],
                       "capacity": dict(capacity or {}), "allocatable": dict(capacity or {}),
                       # Every node's InternalIP is loopback: its host-network agent listens there in tests.
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname",
                                                                                       "address": name}]}}


class FakeKube:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pdbs: list[dict[str, Any]] = []
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        """coordination.k8s.io/v1 Leases by (namespace, name): optimistic concurrency on resourceVersion."""
        """{"selector": {label: value}, "disruptions_allowed": int}"""
        self.conflicts = 0
        self.server_errors = 0
        """Answer the next this-many calls with 500 (an overloaded or restarting API server)."""
        self.termination_s = 0.0
        """How long an evicted pod takes to terminate (its grace period) before it is gone."""
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

            def _server_error(self) -> bool:
                with fake._lock:
                    if fake.server_errors <= 0:
                        return False
                    fake.server_errors -= 1
                self._send(500, status(500, "InternalError", "Internal error occurred: etcdserver: request timed out"))
                return True

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("GET", self.path))
                if self._server_error():
                    return
                parts = url.path.strip("/").split("/")
                with fake._lock:
                    fake._finish_terminations()
                    if url.path == "/api/v1/pods":
                        selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                        unsupported = _unsupported_field(selector)
                        if unsupported is not None:
                            self._send(400, status(400, "BadRequest", f"field label not supported: {unsupported}"))
                            return
                        items = [p for p in fake.pods if _matches(p, selector)]
                        self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                         "items": items})
                    elif url.path == "/api/v1/nodes":
                        self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                         "items": list(fake.nodes.values())})
                    elif len(parts) == 6 and parts[2] == "namespaces" and parts[4] == "pods":
                        found = fake._pod(parts[3], parts[5])
                        if found is None:
                            self._send(404, status(404, "NotFound", f'pods "{parts[5]}" not found'))
                        else:
                            self._send(200, found)
                    elif len(parts) == 7 and parts[:3] == ["apis", "coordination.k8s.io", "v1"] \
                            and parts[5] == "leases":
                        found = fake.leases.get((parts[4], parts[6]))
                        if found is None:
                            missing = f'leases.coordination.k8s.io "{parts[6]}" not found'
                            self._send(404, status(404, "NotFound", missing))
                        else:
                            self._send(200, found)
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
                if self._server_error():
                    return
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
                body = self._body()
                if self._server_error():
                    return
                if len(parts) == 6 and parts[:3] == ["apis", "coordination.k8s.io", "v1"] and parts[5] == "leases":
                    self._create_lease(parts[4], body)
                    return
                # /api/v1/namespaces/NS/pods/NAME/eviction
                if len(parts) != 7 or parts[2] != "namespaces" or parts[4] != "pods" or parts[6] != "eviction":
                    self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                    return
                namespace, name = parts[3], parts[5]
                problem = _eviction_problem(body, name)
                if problem:
                    self._send(400, status(400, "BadRequest", problem))
                    return
                with fake._lock:
                    target = fake._pod(namespace, name)
                    if target is None:
                        self._send(404, status(404, "NotFound", f'pods "{name}" not found'))
                        return
                    for budget in fake.pdbs:
                        labels = target["metadata"].get("labels", {})
                        if all(labels.get(k) == v for k, v in budget["selector"].items()):
                            if budget["disruptions_allowed"] <= 0:
                                refusal = status(429, "TooManyRequests", "Cannot evict pod as it would violate "
                                                                         "the pod's disruption budget.")
                                refusal["details"] = {"causes": [{
                                    "reason": "DisruptionBudget",
                                    "message": f"The disruption budget {budget.get('name', 'pdb')} needs "
                                               f"{budget.get('min_available', 1)} healthy pods and has "
                                               f"{budget.get('min_available', 1)} currently"}]}
                                self._send(429, refusal)
                                return
                            budget["disruptions_allowed"] -= 1
                    if "deletionTimestamp" not in target["metadata"]:
                        target["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                        fake._terminating.append((time.monotonic() + fake.termination_s, target))
                    fake._finish_terminations()
                self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                 "code": 201})

            def _create_lease(self, namespace: str, body: Any) -> None:
                name = str((body or {}).get("metadata", {}).get("name", ""))
                with fake._lock:
                    if body.get("kind") != "Lease" or not name:
                        self._send(400, status(400, "BadRequest", "a Lease with metadata.name is required"))
                    elif (namespace, name) in fake.leases:
                        self._send(409, status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already '
                                                                     "exists"))
                    else:
                        body["metadata"] = {**body["metadata"], "namespace": namespace, "resourceVersion": "1"}
                        fake.leases[(namespace, name)] = body
                        self._send(201, body)

            def do_PUT(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("PUT", self.path))
                parts = url.path.strip("/").split("/")
                body = self._body()
                if self._server_error():
                    return
                if not (len(parts) == 7 and parts[:3] == ["apis", "coordination.k8s.io", "v1"]
                        and parts[5] == "leases"):
                    self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                    return
                key = (parts[4], parts[6])
                with fake._lock:
                    current = fake.leases.get(key)
                    if current is None:
                        self._send(404, status(404, "NotFound", f'leases.coordination.k8s.io "{parts[6]}" not found'))
                        return
                    given = str(body.get("metadata", {}).get("resourceVersion", ""))
                    if given != current["metadata"]["resourceVersion"]:
                        self._send(409, status(409, "Conflict", f'Operation cannot be fulfilled on '
                                                                f'leases.coordination.k8s.io "{parts[6]}": the object '
                                                                "has been modified; please apply your changes to the "
                                                                "latest version and try again"))
                        return
                    body["metadata"] = {**body["metadata"], "namespace": parts[4],
                                        "resourceVersion": str(int(given) + 1)}
                    fake.leases[key] = body
                    self._send(200, body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._terminating: list[tuple[float, dict[str, Any]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if p["metadata"]["name"] == name
                     and p["metadata"]["namespace"] == namespace), None)

    def _finish_terminations(self) -> None:
        """Pods whose grace period is over are gone (called with the lock held)."""
        now = time.monotonic()
        for entry in [e for e in self._terminating if e[0] <= now]:
            self._terminating.remove(entry)
            if entry[1] in self.pods:
                self.pods.remove(entry[1])

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


def _terms(selector: str) -> list[tuple[str, bool, str]]:
    """`a=b,c!=d` -> [(field, equal?, value)]."""
    terms = []
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key, False, value))
        else:
            key, _, value = term.partition("=")
            terms.append((key, True, value.removeprefix("=")))
    return terms


def _unsupported_field(selector: str) -> str | None:
    return next((key for key, _, _ in _terms(selector) if key not in POD_FIELDS), None)


def _field(obj: dict[str, Any], key: str) -> str:
    value: Any = obj
    for part in key.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def _matches(obj: dict[str, Any], selector: str) -> bool:
    return all((_field(obj, key) == value) == equal for key, equal, value in _terms(selector))


def _eviction_problem(body: Any, name: str) -> str | None:
    """What kube-apiserver says about an eviction body that is not a policy/v1 Eviction of this pod."""
    if not isinstance(body, dict):
        return "the body of the request was in an unknown format"
    if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
        return (f"no kind \"{body.get('kind')}\" is registered for version \"{body.get('apiVersion')}\" in "
                "scheme; expected a policy/v1 Eviction")
    if (body.get("metadata") or {}).get("name") != name:
        return "name in URL does not match name in Eviction object"
    return None
