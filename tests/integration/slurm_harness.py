"""A real Slurm on loopback for tests: munged, slurmctld and one slurmd per node, fake GPU GRES.

Every process is started in the foreground under our control and killed on `stop()`, plus a final
sweep for anything left that names the test directory. Two ways to sleep, as on real nodes:

- power-off (a cold boot): the suspend command stops the node's slurmd; when a real magic packet for
  its MAC arrives on the loopback listener, slurmd is started inside a new time namespace whose boot
  time is now, so slurmctld sees a freshly booted node (it refuses a node that did not reboot after a
  power-up request).
- suspend to RAM (nodes in `ram_sleepers`): the suspend command freezes slurmd (SIGSTOP), which is
  what a suspended node looks like to slurmctld; the magic packet thaws it (SIGCONT) and runs the
  shipped systemd-sleep hook (deploy/slurm/greengpu-slurmd-sleep-hook) as systemd-sleep would, with
  `post suspend`. Its restart command stops slurmd and starts it again through the shipped
  greengpu-slurmd-start, as the shipped slurmd.service drop-in does. The boot time stays the old one:
  only the hook's `-b` makes slurmctld accept the node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

BOOT_S = 2.0
RESUME_FROM_RAM_S = 0.5
DEPLOY_SLURM = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
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
        self.ram_sleepers: set[str] = set()
        """Nodes that sleep by suspend to RAM (slurmd started through the shipped greengpu-slurmd-start)."""
        self.slurmd: dict[str, subprocess.Popen[bytes]] = {}
        self.packets: list[tuple[str, bytes]] = []
        self.hook_results: list[subprocess.CompletedProcess[str]] = []
        self.listener_errors: list[str] = []
        self.mac_to_node: dict[bytes, str] = {}
        self._listener: socket.socket | None = None
        self._stop = threading.Event()

    # --- configuration -------------------------------------------------------------------------

    def write_config(self, suspend_program: Path, resume_program: Path, resume_fail_program: Path | None = None,
                     resume_timeout_s: int = 90) -> None:
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
ResumeTimeout={resume_timeout_s}
{f"ResumeFailProgram={resume_fail_program}" if resume_fail_program else ""}
DebugFlags=Power
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

    def slurmd_argv(self, node: str) -> list[str]:
        argv = [_binary("slurmd"), "-D", "-N", node, "-f", str(self.conf)]
        if node in self.ram_sleepers:
            return [str(DEPLOY_SLURM / "greengpu-slurmd-start"), *argv[1:]]
        return argv

    def slurmd_env(self, node: str) -> dict[str, str]:
        """What the shipped node scripts read: the slurmd binary and this node's resumed flag."""
        return {**self.env, "GREENGPU_SLURMD": _binary("slurmd"),
                "GREENGPU_SLURMD_RESUMED_FLAG": str(self.root / "flags" / f"{node}.resumed")}

    def start_slurmd(self, node: str, fresh_boot: bool) -> None:
        argv = self.slurmd_argv(node)
        if fresh_boot:
            # Uptime starts near 0 in the new namespace: slurmctld accepts the node only if its boot time
            # is after the power-up request (else it logs "Still waiting for boot of node").
            uptime_s = int(float(Path("/proc/uptime").read_text().split()[0]))
            argv = [_binary("unshare"), "--time", f"--boottime=-{uptime_s}", *argv]
        log = (self.root / "log" / f"slurmd.{node}.out").open("ab")
        process = subprocess.Popen(argv, env=self.slurmd_env(node), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=log, start_new_session=True)
        self.processes.append(process)
        self.slurmd[node] = process
        (self.root / "pids").mkdir(exist_ok=True)
        (self.root / "pids" / node).write_text(str(process.pid))

    def slurmd_pid(self, node: str) -> int | None:
        path = self.root / "pids" / node
        return int(path.read_text()) if path.exists() else None

    def slurmd_run_state(self, node: str) -> str:
        """The kernel's state letter of the node's slurmd (R/S running, T stopped), or "gone"."""
        pid = self.slurmd_pid(node)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "gone"
        return "gone" if state in ("Z", "X") else state

    def _is_off(self, node: str) -> bool:
        return self.slurmd_run_state(node) == "gone"

    def _is_frozen(self, node: str) -> bool:
        return self.slurmd_run_state(node) in ("T", "t")

    def power_off_script(self) -> Path:
        """A node's "systemctl poweroff": stops that node's slurmd (its whole process group)."""
        return self._signal_slurmd_script("power_off.py", "SIGTERM")

    def suspend_to_ram_script(self) -> Path:
        """A node's "systemctl suspend": freezes that node's slurmd (its whole process group)."""
        return self._signal_slurmd_script("suspend_to_ram.py", "SIGSTOP")

    def _signal_slurmd_script(self, name: str, signal_name: str) -> Path:
        """A script taking (root, node) that sends `signal_name` to that node's slurmd process group."""
        script = self.root / name
        script.write_text(
            "import os, signal, sys\n"
            "pid = int(open(os.path.join(sys.argv[1], 'pids', sys.argv[2])).read())\n"
            f"os.killpg(pid, signal.{signal_name})\n")
        return script

    def _restart_slurmd_script(self) -> Path:
        """`systemctl restart slurmd` for one node: stop it, wait until it is gone, start it again."""
        script = self.root / "restart_slurmd.py"
        script.write_text(
            "import json, os, signal, subprocess, sys, time\n"
            "root, node = sys.argv[1], sys.argv[2]\n"
            "argv = json.loads(open(os.path.join(root, 'argv', node + '.json')).read())\n"
            "pid = int(open(os.path.join(root, 'pids', node)).read())\n"
            "os.killpg(pid, signal.SIGTERM)\n"
            "def gone():\n"
            "    try:\n"
            "        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] in 'ZX'\n"
            "    except OSError:\n"
            "        return True\n"
            "deadline = time.monotonic() + 20\n"
            "while not gone() and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "log = open(os.path.join(root, 'log', f'slurmd.{node}.out'), 'ab')\n"
            "new = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)\n"
            "open(os.path.join(root, 'pids', node), 'w').write(str(new.pid))\n")
        return script

    def resume_from_ram(self, node: str) -> subprocess.CompletedProcess[str]:
        """The node wakes from RAM: slurmd thaws, then systemd-sleep runs the shipped hook with `post suspend`."""
        pid = self.slurmd_pid(node)
        assert pid is not None
        os.killpg(pid, signal.SIGCONT)
        (self.root / "flags").mkdir(exist_ok=True)
        (self.root / "argv").mkdir(exist_ok=True)
        (self.root / "argv" / f"{node}.json").write_text(json.dumps(self.slurmd_argv(node)))
        restart = [sys.executable, str(self._restart_slurmd_script()), str(self.root), node]
        env = {**self.slurmd_env(node), "GREENGPU_SLURMD_RESTART": shlex.join(restart)}
        return subprocess.run([str(DEPLOY_SLURM / "greengpu-slurmd-sleep-hook"), "post", "suspend"], env=env,
                              capture_output=True, text=True, timeout=30, check=False)

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
        for node in self.nodes:
            pid = self.slurmd_pid(node)
            if pid is not None and self._is_frozen(node):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGCONT)  # a frozen process would hold its SIGTERM
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
            if not (node and packet[:6] == b"\xff" * 6 and packet[6:] == packet[6:12] * 16):
                continue
            if self._is_off(node):
                time.sleep(BOOT_S)  # firmware and OS: the boot happens after the request, never before
                self.start_slurmd(node, fresh_boot=True)
            elif self._is_frozen(node):
                time.sleep(RESUME_FROM_RAM_S)
                try:
                    self.hook_results.append(self.resume_from_ram(node))
                except Exception as error:  # noqa: BLE001 - a thread's error must reach the test
                    self.listener_errors.append(f"{node}: {error!r}")

    # --- queries -------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # cwd: sbatch writes each job's slurm-N.out in its working directory; keep it in the test's tree.
        return subprocess.run([_binary(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=30, check=check, cwd=self.root)

    def states(self) -> dict[str, set[str]]:
        # slurmctld can miss one query while it applies an update (scontrol then exits non-zero with no nodes):
        # ask again for a few seconds rather than answer with no nodes at all.
        for _ in range(10):
            done = self.run("scontrol", "-o", "show", "node", check=False)
            if done.returncode == 0 and "NodeName=" in done.stdout:
                break
            time.sleep(0.5)
        out = done.stdout
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
        logs = f"listener errors: {self.listener_errors}\nhooks: {self.hook_results}\n"
        logs += "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").glob("*")))
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")

    def wait(self, condition: object, timeout_s: float, what: str) -> None:
        self._wait(condition, timeout_s, what)
