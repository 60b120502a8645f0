"""The slim core: commands for GPU nodes and Slurm controllers run without the optional libraries, and a
command whose extra is missing says which extra to install, in one line, exit 1.

The libraries are made unimportable in a child interpreter (an import hook raising the same
ModuleNotFoundError a missing package raises), so this runs on a machine that has them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OPTIONAL = ("pandas", "numpy", "statsmodels", "scipy", "matplotlib", "jinja2", "kubernetes", "psycopg", "ray")
WITHOUT_EXTRAS = f"""
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
from greengpu.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL!r})
assert not loaded, loaded
sys.exit(code)
"""


def run_slim(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=False)


def test_node_and_controller_commands_need_no_extra(tmp_path: Path) -> None:
    assert run_slim("check", "--cluster", "examples/lab-a100.cluster.yaml", "--policy", "default").returncode == 0
    agent = run_slim("agent", "--backend", "fake", "--once", "--listen", "127.0.0.1:0",
                     "--journal", str(tmp_path / "journal.jsonl"))
    assert agent.returncode == 0, agent.stderr
    suspend = run_slim("node-suspend", "--backend", "fake", "--dry-run")
    assert suspend.returncode == 0, suspend.stderr
    status = run_slim("slurm", "--cluster", "examples/lab-a100.cluster.yaml", "--state", str(tmp_path / "s.db"),
                      "status")
    assert status.returncode == 0 and status.stdout.startswith("no node put to sleep"), status.stderr


def test_a_missing_extra_is_named_in_one_line(tmp_path: Path) -> None:
    plan = run_slim("plan", "--models", "baselines")
    assert plan.returncode == 1
    assert plan.stderr.count("\n") == 1 and "this command needs the 'plan' extra" in plan.stderr
    assert "python3 -m pip install '.[plan]'" in plan.stderr
    kube = run_slim("kube", "--cluster", "examples/lab-a100.cluster.yaml", "--state", str(tmp_path / "k.db"),
                    "--kube-host", "http://127.0.0.1:9", "verify")
    assert kube.returncode == 1 and kube.stderr.count("\n") == 1
    assert "the Kubernetes client is not installed (the 'kube' extra)" in kube.stderr


def test_a_postgresql_ledger_without_the_fleet_extra_is_named_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://greengpu@/ledger?host={tmp_path}"
    report = run_slim("report", "--ledger", url, "--month", "2024-01")
    assert report.returncode == 1 and report.stderr.count("\n") == 1, report.stderr
    assert "this command needs the 'fleet' extra (psycopg is not installed)" in report.stderr
    assert "python3 -m pip install '.[fleet]'" in report.stderr
    # An SQLite ledger needs nothing installed.
    missing = run_slim("report", "--ledger", str(tmp_path / "none.db"), "--month", "2024-01")
    assert missing.returncode == 2 and "no such ledger file" in missing.stderr
