"""A throwaway Ray cluster for the sweep's tests: `ray start --head --block` on loopback, 2 CPUs, a 100 MB object
store, no dashboard, in its own temporary folder and process group, stopped by that group's id. Without Ray the
tests skip with the reason, except in CI, where they fail (.ci/run installs the ray extra)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from pg_server import missing


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def ray_head(cpus: int = 2) -> Iterator[str]:
    """The address (127.0.0.1:PORT) of a started Ray head."""
    ray_cli = Path(sys.executable).parent / "ray"
    # Looked up, not imported: Ray in the test process itself (its threads, its fork handlers) would slow every
    # later test that forks, such as the sweep guard's process pool.
    if importlib.util.find_spec("ray") is None:
        missing("Ray is not installed (the 'ray' extra)")
    if not ray_cli.exists():
        missing(f"{ray_cli} not found (the 'ray' extra)")
    temp = Path(tempfile.mkdtemp(prefix="gg-ray-"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    log = (temp / "head.log").open("w")
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                             "--port", str(port), "--num-cpus", str(cpus), "--object-store-memory", "100000000",
                             "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(temp)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        deadline = time.monotonic() + 90
        while "This command will now block" not in (temp / "head.log").read_text(errors="replace"):
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray head did not start:\n{(temp / 'head.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield address
    finally:
        # Its own process group: the head and every raylet, worker and store it started, and nothing else.
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=1)  # its graceful drain takes 30 s: a throwaway cluster needs none
        except subprocess.TimeoutExpired:
            pass
        finally:
            with suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
