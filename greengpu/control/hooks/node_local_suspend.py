"""Node-local suspend on Kubernetes: the daemon asks the node's own agent, which suspends its host.

Why the agent and why HTTP: the daemon runs as UID 65532 in a read-only pod off the GPU nodes, with no
ssh key and no business holding one; the agent already runs on every GPU node, as root, with the host's
network. The daemon POSTs `/v1/suspend` to the agent's port on the node's InternalIP with a bearer token
(a Secret both pods mount). HTTP rather than a node annotation the agent watches: the answer comes back in
the same request (the exit code and stderr of the host's suspend call), and no agent needs the right to
patch nodes (RBAC cannot limit that to its own node: every agent could cordon every node).

The agent refuses while a GPU process runs or a GPU is busy (409, as `greengpu node-suspend` does), then
asks the host's logind to suspend over the host's system D-Bus socket (mounted into the pod; root is
allowed by logind's polkit rules) and answers 200 only when that call succeeded; any other answer, or no
answer, is a failed suspend for the daemon: the node is uncordoned, recorded awake and alerted.
"""

from __future__ import annotations

import hmac
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from greengpu.control.hooks.sleep_control import SUSPEND_TIMEOUT_S, SuspendResult, run_suspend

log = logging.getLogger("greengpu.suspend")

SUSPEND_PATH = "/v1/suspend"
AGENT_PORT = 9474
HOST_SUSPEND_COMMAND = ("dbus-send --system --print-reply --dest=org.freedesktop.login1 /org/freedesktop/login1 "
                        "org.freedesktop.login1.Manager.Suspend boolean:false")
"""logind's Suspend through the host's system bus (/run/dbus/system_bus_socket, mounted from the host):
the same call `systemctl suspend` makes. It returns once the sleep job is queued, before the freeze."""
MIN_TOKEN_CHARS = 16


def read_suspend_token(path: str | Path | None) -> str:
    """The shared bearer token; ValueError with a line for people when it is missing or too short."""
    if path is None:
        raise ValueError("no token file given (--agent-token-file / --suspend-token-file)")
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror or error}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{path}: the token must be at least {MIN_TOKEN_CHARS} characters")
    return token


class SuspendEndpoint:
    """The agent's `POST /v1/suspend`: authenticate, refuse while GPUs work, suspend the host, say how it went."""

    def __init__(self, node: str, token_file: str | None, busy_gpus: Callable[[], list[str]],
                 command: str = HOST_SUSPEND_COMMAND, timeout_s: float = SUSPEND_TIMEOUT_S) -> None:
        self.node = node
        self.token_file = token_file
        self.busy_gpus = busy_gpus
        self.command = command
        self.timeout_s = timeout_s

    def handle(self, authorization: str | None) -> tuple[int, dict[str, object]]:
        """(HTTP status, JSON body) for one request with this Authorization header."""
        try:
            token = read_suspend_token(self.token_file)
        except ValueError as error:
            return 503, {"suspended": False, "error": f"node-local suspend is not configured: {error}"}
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return 401, {"suspended": False, "error": "a valid bearer token is required"}
        try:
            busy = self.busy_gpus()
        except Exception as error:  # noqa: BLE001 - GPUs that cannot be read may be working: stay awake
            return 409, {"suspended": False, "error": f"cannot read the GPUs: {error}"}
        if busy:
            return 409, {"suspended": False, "error": f"not suspending: work on {', '.join(busy)}"}
        result = run_suspend(self.command, self.node, self.timeout_s)
        log.log(logging.INFO if result.ok else logging.ERROR, "%s", result.describe())
        body: dict[str, object] = {"suspended": result.ok, "returncode": result.returncode,
                                   "stderr": result.stderr_tail, "command": self.command}
        return (200 if result.ok else 500), body


class AgentSuspender:
    """The daemon's suspend on Kubernetes: ask `node`'s agent over HTTP; a `SuspendResult` whatever happens."""

    def __init__(self, node_address: Callable[[str], str], token_file: str | None, port: int = AGENT_PORT,
                 timeout_s: float = SUSPEND_TIMEOUT_S + 10) -> None:
        self.node_address = node_address
        self.token_file = token_file
        self.port = port
        self.timeout_s = timeout_s

    def __call__(self, node: str) -> SuspendResult:
        argv = ("POST", f"agent of {node}{SUSPEND_PATH}")
        try:
            token = read_suspend_token(self.token_file)
            url = f"http://{self.node_address(node)}:{self.port}{SUSPEND_PATH}"
        except Exception as error:  # noqa: BLE001 - no token or no address: the node is not suspended
            return SuspendResult(node, argv, None, str(error), 0.0)
        argv = ("POST", url)
        request = urllib.request.Request(url, data=b"{}", method="POST", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:  # noqa: S310 - http by design
                answer = json.loads(reply.read() or b"{}")
                code = 0 if answer.get("suspended") is True else 1
                return SuspendResult(node, argv, code, "" if code == 0 else json.dumps(answer), 0.0)
        except urllib.error.HTTPError as error:
            said = error.read().decode(errors="replace")
            try:
                answer = json.loads(said)
                said = answer.get("error") or f"exit {answer.get('returncode')}: {answer.get('stderr', '')}"
            except ValueError:
                pass
            return SuspendResult(node, argv, error.code, f"agent answered {error.code}: {said}"[-400:], 0.0)
        except (OSError, ValueError) as error:
            # No answer: the node may or may not have gone to sleep; counted as failed (awake, uncordoned).
            return SuspendResult(node, argv, None, f"no answer from the agent: {error}", 0.0)
