"""A real Slurm on loopback for tests: munged, slurmctld and one slurmd per node, fake GPU GRES.

Every process is started in the foreground under our control and killed on `stop()`, plus a final
sweep for anything left that names the test directory. A node "powers on" when a real magic packet
for its MAC arrives on the loopback listener: its slurmd is started inside a new time namespace
whose boot time is now, so slurmctld sees a freshly booted node (it refuses a node that did not
reboot after a power-up request).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

BOOT_S = 2.0
SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "squeue", "scancel", "unshare")


def missing_binaries() -> list[str]:
    return [b for b in SLURM_BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


class SlurmCluster:
    def __init__(self, root: Path, node_count: int = 4, gpus_per_node: int = 4) -> None:
        self.root = root
        self.nodes = [f"node{i}" for i in range(1, node_count + 1)]
        self.gpus = gpus_per_node
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.slurmd: dict[str, subprocess.Popen[bytes]] = {}
        self.packets: list[tuple[str, bytes]] = []
        self.mac_to_node: dict[bytes, str] = {}
        self._listener: socket.socket | None = None
        self._stop = threading.Event()

    # --- configuration -------------------------------------------------------------------------

    def write_config(self, suspend_program: Path, resume_program: Path) -> None:
        root = self.root
        for sub in ("state", "log", "dev"):
            (root / sub).mkdir(exist_ok=True)
        for index in range(self.gpus):
            device = root / "dev" / f"nvidia{index}"
            if not device.exists():
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a char device, as GRES File= wants
        node_lines = "\n".join(
            f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={_free_port()} CPUs=2 "
            f"RealMemory=1000 Gres=gpu:{self.gpus} State=UNKNOWN" for node in self.nodes)
        self.conf.write_text(f"""\
ClusterName=greengputest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/slurmd.%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
SlurmctldDebug=info
SlurmdDebug=info
SlurmdTimeout=30
SuspendProgram={suspend_program}
ResumeProgram={resume_program}
SuspendTime=3600
SuspendTimeout=5
ResumeTimeout=90
{node_lines}
PartitionName=gpu Nodes={self.nodes[0][:-1]}[1-{len(self.nodes)}] Default=YES MaxTime=INFINITE State=UP
""")
        (root / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.nodes[0][:-1]}[1-{len(self.nodes)}] Name=gpu "
            f"File={root}/dev/nvidia[0-{self.gpus - 1}]\n")

    # --- processes -----------------------------------------------------------------------------

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.root / "log" / log_name).open("ab")
        process = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def start(self) -> None:
        root = self.root
        self._spawn([_binary("munged"), "-F", "--force", f"--socket={root}/munge.sock",
                     f"--pid-file={root}/munged.pid", f"--log-file={root}/log/munged.log",
                     f"--seed-file={root}/munge.seed"], "munged.out")
        self._wait(lambda: (root / "munge.sock").exists(), 15, "munged socket")
        self._spawn([_binary("slurmctld"), "-D", "-f", str(self.conf)], "slurmctld.out")
        for node in self.nodes:
            self.start_slurmd(node, fresh_boot=False)
        self._wait(lambda: self.states() and all("IDLE" in flags for flags in self.states().values()), 60,
                   "all nodes idle")

    def start_slurmd(self, node: str, fresh_boot: bool) -> None:
        argv = [_binary("slurmd"), "-D", "-N", node, "-f", str(self.conf)]
        if fresh_boot:
            # Uptime starts near 0 in the new namespace: slurmctld accepts the node only if its boot time
            # is after the power-up request (else it logs "Still waiting for boot of node").
            uptime_s = int(float(Path("/proc/uptime").read_text().split()[0]))
            argv = [_binary("unshare"), "--time", f"--boottime=-{uptime_s}", *argv]
        self.slurmd[node] = self._spawn(argv, f"slurmd.{node}.out")
        (self.root / "pids").mkdir(exist_ok=True)
        (self.root / "pids" / node).write_text(str(self.slurmd[node].pid))

    def _is_off(self, node: str) -> bool:
        process = self.slurmd.get(node)
        return process is None or process.poll() is not None

    def power_off_script(self) -> Path:
        """A node's "systemctl suspend": stops that node's slurmd (its whole process group)."""
        script = self.root / "power_off.py"
        script.write_text(
            "import os, signal, sys\n"
            "pid = int(open(os.path.join(sys.argv[1], 'pids', sys.argv[2])).read())\n"
            "os.killpg(pid, signal.SIGTERM)\n")
        return script

    def stop(self) -> None:
        self._stop.set()
        # Jobs first, while slurmctld still runs: their slurmstepd would outlive the daemons.
        queued = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split() if self.processes else []
        if queued:
            self.run("scancel", *queued, check=False)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.3)
        if self._listener is not None:
            self._listener.close()
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        # Anything else that names our directory (slurmstepd of a job, a hook's child) goes too.
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes()
                environ = (pid_dir / "environ").read_bytes()
            except OSError:
                continue
            mine = str(self.root).encode()
            if (mine in cmdline or mine in environ) and int(pid_dir.name) != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)

    # --- wake-on-LAN listener: a magic packet powers a node on ---------------------------------

    def listen_for_magic_packets(self, macs: dict[str, str]) -> int:
        self.mac_to_node = {bytes.fromhex(mac.replace(":", "")): node for node, mac in macs.items()}
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.5)
        self._listener = sock
        threading.Thread(target=self._listen, daemon=True).start()
        return int(sock.getsockname()[1])

    def _listen(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                packet, _ = self._listener.recvfrom(4096)
            except (TimeoutError, OSError):
                continue
            node = self.mac_to_node.get(packet[6:12])
            self.packets.append((node or "?", packet))
            if node and packet[:6] == b"\xff" * 6 and packet[6:] == packet[6:12] * 16 and self._is_off(node):
                time.sleep(BOOT_S)  # firmware and OS: the boot happens after the request, never before
                self.start_slurmd(node, fresh_boot=True)

    # --- queries -------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # cwd: sbatch writes each job's slurm-N.out in its working directory; keep it in the test's tree.
        return subprocess.run([_binary(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=30, check=check, cwd=self.root)

    def states(self) -> dict[str, set[str]]:
        out = self.run("scontrol", "-o", "show", "node", check=False).stdout
        states = {}
        for line in out.splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if "NodeName" in fields:
                states[fields["NodeName"]] = set(fields.get("State", "").split("+"))
        return states

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        for part in out.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        return "UNKNOWN"

    def _wait(self, condition: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(condition) and condition():
                return
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").glob("*")))
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")

    def wait(self, condition: object, timeout_s: float, what: str) -> None:
        self._wait(condition, timeout_s, what)
