"""A fake cloud provider command for the Slurm cloud-node tests: what a pool's `launch_command` and
`release_command` would call (an AWS CLI or Terraform wrapper), on this machine.

    fake_cloud_provider.py --root DIR --conf SLURM_CONF launch NODE INSTANCE_TYPE REGION
    fake_cloud_provider.py --root DIR release NODE

Every call is appended to DIR/provider.log (`launch NODE TYPE REGION`, `release NODE`). `launch` "boots an
instance": it starts the node's slurmd (detached, after BOOT_S, in a new time namespace whose boot time
is then, as a fresh instance's is: slurmctld accepts a resumed node only if it booted after the request) and prints the
instance's address, `127.0.0.1 localhost`, as its last line. When DIR/fail-launch/NODE exists the launch
fails as a provider does when it has no capacity (exit 3, the reason on stderr) and starts nothing.
`release` "terminates the instance": it stops that slurmd; releasing a node with no instance is not an
error (a provider's terminate is idempotent).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

BOOT_S = 2.0
"""From launch to the instance's slurmd starting."""


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


def launch(root: Path, conf: str, node: str) -> int:
    if (root / "fail-launch" / node).exists():
        print(f"InsufficientInstanceCapacity: no capacity for {node}", file=sys.stderr)
        return 3
    argv = [sys.executable, __file__, "--root", str(root), "--conf", conf, "boot", node]
    (root / "log").mkdir(exist_ok=True)
    with (root / "log" / f"slurmd.{node}.out").open("ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    (root / "instances").mkdir(exist_ok=True)
    (root / "instances" / node).write_text(str(process.pid))
    print(f"instance for {node} starting")
    print("127.0.0.1 localhost")
    return 0


def boot(conf: str, node: str) -> int:
    """The instance boots (firmware and OS take a while: its boot is after the launch request, never
    before), then its slurmd starts with the boot time of a fresh machine."""
    time.sleep(BOOT_S)
    uptime_s = int(float(Path("/proc/uptime").read_text().split()[0]))
    os.execv(_binary("unshare"), [_binary("unshare"), "--time", f"--boottime=-{uptime_s}", _binary("slurmd"), "-D",
                                  "-N", node, "-f", conf])
    return 1


def release(root: Path, node: str) -> int:
    pid_file = root / "instances" / node
    if not pid_file.exists():
        return 0
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # a terminated instance stops at once
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink()
    return 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--conf", default=os.environ.get("SLURM_CONF", ""))
    parser.add_argument("action", choices=("launch", "release", "boot"))
    parser.add_argument("node")
    parser.add_argument("details", nargs="*")
    args = parser.parse_args()
    if args.action == "boot":
        return boot(args.conf, args.node)
    with (args.root / "provider.log").open("a") as record:
        record.write(" ".join([args.action, args.node, *args.details]) + "\n")
    if args.action == "launch":
        return launch(args.root, args.conf, args.node)
    return release(args.root, args.node)


if __name__ == "__main__":
    sys.exit(main())
