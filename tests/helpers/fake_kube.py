"""A small Kubernetes API server on loopback for tests: real HTTP, the real API's paths, status codes
and JSON shapes for the few calls greengpu makes. Not a mock: it keeps objects and answers from them.
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
        gpus: int = 1, phase: str = "Running") -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {},
                         "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer:1",
                                                       "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


class FakeKube:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
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

            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                fake.requests.append(("GET", self.path))
                if url.path == "/api/v1/pods":
                    selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                    with fake._lock:
                        items = [p for p in fake.pods if _matches(p, selector)]
                    self._send(200, {"kind": "PodList", "apiVersion": "v1",
                                     "metadata": {"resourceVersion": "10"}, "items": items})
                    return
                self._send(404, status(404, "NotFound", f"the server could not find the requested resource "
                                                         f"({url.path})"))

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


def _matches(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key == "spec.nodeName" and obj["spec"].get("nodeName") != value:
            return False
    return True
