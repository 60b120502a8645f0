"""`greengpu spot webhook`: the mutating admission webhook over HTTPS (docs/SPOT-LIVE.md).

`POST /mutate` takes an AdmissionReview (admission.k8s.io/v1) and answers it with greengpu.spot.admission's
verdict; `GET /healthz` answers `ok` (the Deployment's probes). TLS from a certificate and key file (the
API server only calls webhooks over HTTPS; the certificate must name the Service, and its CA goes in the
MutatingWebhookConfiguration's caBundle).

With `--daemon URL` (`DaemonDecisions`) the decision is the daemon's: the capacity lever of its tick
(greengpu.brain.capacity_choice) decides for the pods it sees waiting, and the webhook asks
`GET URL/v1/capacity/NAMESPACE/NAME` (a bounded read, a short timeout); no decision there, a daemon that
cannot be reached or an answer it cannot read leave the pod unchanged. Without it the webhook asks the same
rule itself, with the inventory's prices (deprecated: one brain decides).

Fail open: whatever goes wrong inside (a decision that raises, a pod shaped oddly) the pod is allowed
unchanged and the error logged, and the MutatingWebhookConfiguration says `failurePolicy: Ignore`, so a
webhook that is down or slow never blocks a pod either. Only a request that is not an AdmissionReview at
all (no uid to answer to) gets a 400.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, urlsplit

from greengpu.control.daemon.http_serve import send_reply
from greengpu.json_types import JsonObject
from greengpu.spot.admission import Verdict, decide_pod, review_response
from greengpu.spot.pod_facts import CapacityKind, Decide, SpotJobFacts

log = logging.getLogger("greengpu.spot")

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest AdmissionReview read (the API server's own limit on an object is about 1.5 MiB)."""
READ_TIMEOUT_S = 10.0
"""A client that sends nothing for this long is dropped (the API server's webhook timeout is at most 30 s)."""
DAEMON_TIMEOUT_S = 2.0
"""The most a pod's admission waits on the daemon (the API server's webhook timeout is 10 s by default)."""
MAX_DAEMON_ANSWER_BYTES = 64 * 1024


class DaemonDecisions:
    """The daemon's capacity decisions, read over its HTTP API (`GET /v1/capacity/NAMESPACE/NAME`)."""

    def __init__(self, base_url: str, timeout_s: float = DAEMON_TIMEOUT_S) -> None:
        """ValueError when `base_url` is not an http(s) URL."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._said: set[str] = set()

    def _once(self, why: str) -> None:
        if why not in self._said:
            self._said.add(why)
            log.warning("spot webhook: %s: pods are admitted unchanged meanwhile", why)

    def lookup(self, job_id: str) -> CapacityKind | None:
        """`spot` or `on-demand` as the daemon's last good tick decided for `job_id`; None for anything else
        (no decision, `wait`, a daemon that cannot be reached or says something unreadable): unchanged."""
        url = f"{self.base_url}/v1/capacity/{quote(job_id, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as reply:  # noqa: S310 (http(s) checked)
                body = reply.read(MAX_DAEMON_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                self._once(f"the daemon {self.base_url} answered {error.code}")
            return None
        except (OSError, ValueError) as error:
            self._once(f"cannot ask the daemon {self.base_url} ({error})")
            return None
        try:
            answer = json.loads(body) if len(body) <= MAX_DAEMON_ANSWER_BYTES else None
        except ValueError:
            answer = None
        kind = answer.get("kind") if isinstance(answer, dict) else None
        if kind is None:
            self._once(f"the daemon {self.base_url} gave an answer that is not a capacity decision")
        return "spot" if kind == "spot" else "on-demand" if kind == "on-demand" else None

    def for_request(self, request: JsonObject) -> Decide:
        """The decision for one admission request's pod: the daemon's for `NAMESPACE/NAME` (a pod made from
        generateName has no name yet, and no decision)."""
        pod = request.get("object")
        metadata = pod.get("metadata") if isinstance(pod, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        namespace = request.get("namespace") or (metadata.get("namespace") if isinstance(metadata, dict) else None)
        if not isinstance(name, str) or not isinstance(namespace, str) or not name or not namespace:
            return lambda facts: None
        job_id = f"{namespace}/{name}"

        def decide(facts: SpotJobFacts) -> CapacityKind | None:
            return self.lookup(job_id)

        return decide


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context with the certificate chain and key (TLS 1.2 or later); OSError or ssl.SSLError
    when they cannot be read or do not match."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


CERT_SOON_S = 14 * 86_400.0
"""A certificate that expires within this is warned about at start."""


def certificate_warning(cert_file: str, now_s: float) -> str | None:
    """One line when the certificate in `cert_file` has expired or expires within CERT_SOON_S (the API server
    then refuses the webhook and, failing open, pods go unsteered without a word); None otherwise or when
    its dates cannot be read."""
    try:
        not_after = ssl._ssl._test_decode_cert(cert_file)["notAfter"]  # type: ignore[attr-defined]
        expires_s = ssl.cert_time_to_seconds(not_after)
    except (AttributeError, KeyError, ValueError, OSError, ssl.SSLError):
        return None
    left_s = expires_s - now_s
    if left_s <= 0:
        return (f"--cert {cert_file}: the certificate expired {-left_s / 86_400:.0f} days ago ({not_after}); the "
                "API server will refuse this webhook (pods are admitted unsteered): renew it")
    if left_s < CERT_SOON_S:
        return f"--cert {cert_file}: the certificate expires in {left_s / 86_400:.1f} days ({not_after}): renew it"
    return None


def pod_name(request: JsonObject) -> str:
    """`namespace/name` of the request's pod for the log (a pod made from generateName has no name yet)."""
    pod = request.get("object")
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    name = metadata.get("name") or metadata.get("generateName") if isinstance(metadata, dict) else None
    return f"{request.get('namespace') or '?'}/{name or request.get('name') or '?'}"


def answer(review: JsonObject, decide: Decide, now_s: float) -> tuple[JsonObject, Verdict | None]:
    """The AdmissionReview answer and the verdict behind it (None: an internal error, allowed unchanged)."""
    found = review.get("request")
    request = found if isinstance(found, dict) else {}
    try:
        verdict = decide_pod(request, decide, now_s)
    except Exception:  # noqa: BLE001 - fail open: a pod is never blocked by greengpu's own error
        log.exception("spot webhook: error deciding on pod %s; allowed unchanged", pod_name(request))
        return review_response(review, None), None
    return review_response(review, verdict), verdict


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """A connection that fails (a client that does not trust the certificate, a handshake cut short) is
        one log line, not socketserver's traceback on stderr."""
        log.warning("spot webhook: connection from %s failed: %s", client_address[0], sys.exc_info()[1])


class _ServerV6(_Server):
    address_family = socket.AF_INET6


class WebhookServer:
    """The webhook on `host:port` over TLS, in a background thread; `port` 0 picks a free one."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, decide: Decide,
                 clock: Callable[[], float] = time.time, cert_file: str | None = None,
                 daemon: DaemonDecisions | None = None) -> None:
        """Binds at once (an address in use raises OSError here, before anything else happens). With
        `cert_file`, `/healthz` carries a `Warning` header while the certificate has expired or soon will
        (still 200: the webhook serves, and fails open). With `daemon`, the decision is the daemon's."""

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_S

            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                if self.path.split("?", 1)[0] == "/healthz":
                    warning = certificate_warning(cert_file, clock()) if cert_file else None
                    self._reply(200, b"ok\n", "text/plain",
                                {"Warning": f'199 greengpu "{warning}"'} if warning else None)
                else:
                    self._reply(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                if self.path.split("?", 1)[0] != "/mutate":
                    self._reply(404, b"not found\n", "text/plain")
                    return
                review = self._review()
                if review is None:
                    return
                request = review["request"]
                if not isinstance(request, dict):  # _review answered 400 to these
                    return
                chosen = daemon.for_request(request) if daemon is not None else decide
                body, verdict = answer(review, chosen, clock())
                if verdict is not None:
                    log.info("spot webhook: %s: %s", pod_name(request), verdict.reason)
                self._reply(200, json.dumps(body).encode(), "application/json")

            def _review(self) -> JsonObject | None:
                """The request's AdmissionReview, or None after answering 400/413 (no uid to answer to)."""
                try:
                    length = int(self.headers.get("Content-Length", ""))
                except ValueError:
                    self._reply(411, b"Content-Length required\n", "text/plain")
                    return None
                if not 0 <= length <= MAX_BODY_BYTES:
                    self._reply(413, b"request too large\n", "text/plain")
                    return None
                try:
                    review = json.loads(self.rfile.read(length))
                except (ValueError, UnicodeDecodeError):
                    review = None
                if not isinstance(review, dict) or not isinstance(review.get("request"), dict) \
                        or not review["request"].get("uid"):
                    log.warning("spot webhook: a request that is not an AdmissionReview from %s",
                                self.client_address[0])
                    self._reply(400, b"expected an AdmissionReview with request.uid\n", "text/plain")
                    return None
                return review

            def _reply(self, status: int, body: bytes, content_type: str,
                       headers: dict[str, str] | None = None) -> None:
                send_reply(self, status, body, content_type, headers)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the http.server API)
                log.debug("spot webhook: " + format, *args)

        server_class = _ServerV6 if ":" in host else _Server
        self.server = server_class((host, port), Handler)
        # The handshake happens in the request's own thread (with its read timeout), not in accept():
        # a client that stalls it must not hold up every other pod's admission.
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="spot-webhook", daemon=True)

    def start(self) -> WebhookServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
