"""The daemon runs from the slim install (`pip install .`, no extras): no numpy, pandas, scipy, statsmodels or
matplotlib. Real subprocesses in which importing any of them fails, as it does where they are not installed
(the daemon's import chain reached numpy through the warm reserve's forecast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
BLOCKED = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "pandas", "scipy", "statsmodels", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocked())
for name in list(sys.modules):
    if name.split(".")[0] in ("numpy", "pandas", "scipy", "statsmodels", "matplotlib"):
        del sys.modules[name]
from greengpu.cli import main
sys.exit(main(sys.argv[1:]))
"""


def slim(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", BLOCKED, *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def test_daemon_help_and_a_tick_on_the_fake_backend_need_no_numpy(tmp_path: Path) -> None:
    assert slim("daemon", "--help").returncode == 0
    result = slim("daemon", "--backend", "fake", "--cluster", str(ROOT / "examples" / "lab-a100.cluster.yaml"),
                  "--policy", "default", "--state", str(tmp_path / "state"), "--once", "--listen", "127.0.0.1:0")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert "extra" not in result.stderr and "Traceback" not in result.stderr
