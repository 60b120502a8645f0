"""The Slurm adapter's command runner against a stand-in `scontrol` that fails as the real one does.

A real slurmctld cannot be made busy on demand, so the stand-in prints the real scontrol's line for a request
that got no reply within MessageTimeout and exits 1, as scontrol does."""

from __future__ import annotations

from pathlib import Path

import pytest

from greengpu.backends import slurm

BUSY_LINE = "slurm_update error: Socket timed out on send/recv operation"
DEAD_LINE = "slurm_update error: Unable to contact slurm controller (connect failure)"


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: list[str]) -> Path:
    """An scontrol that fails once with each line of `failures`, in order, then succeeds; every call's
    arguments go to calls.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for index, line in enumerate(failures):
        (tmp_path / f"fail-{index}").write_text(line + "\n")
    script = bin_dir / "scontrol"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {tmp_path}/calls.txt
for f in $(ls {tmp_path} | grep '^fail-' | sort); do
  cat {tmp_path}/$f >&2; rm {tmp_path}/$f; exit 1
done
echo "updated"
""")
    script.chmod(0o755)
    monkeypatch.setenv("GREENGPU_SLURM_BIN", str(bin_dir))
    monkeypatch.setattr(slurm, "BUSY_RETRY_DELAYS_S", (0.01, 0.01))
    return tmp_path / "calls.txt"


def test_a_busy_controller_gets_another_try_with_the_same_request(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(tmp_path, monkeypatch, [BUSY_LINE, BUSY_LINE])
    assert slurm.run("scontrol", "update", "nodename=spot1", "nodeaddr=10.0.0.7", retry_when_busy=True) == "updated\n"
    assert calls.read_text().splitlines() == ["update nodename=spot1 nodeaddr=10.0.0.7"] * 3


def test_a_controller_busy_three_times_running_is_a_failure_with_slurms_line(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(tmp_path, monkeypatch, [BUSY_LINE] * 3)
    with pytest.raises(slurm.SlurmError, match="Socket timed out on send/recv operation"):
        slurm.run("scontrol", "update", "nodename=spot1", "nodeaddr=10.0.0.7", retry_when_busy=True)
    assert len(calls.read_text().splitlines()) == 3


def test_without_asking_for_tries_a_busy_controller_fails_at_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks and the daemon run under time budgets (systemd, Slurm, the watchdog): they fail safe at once."""
    calls = _stand_in(tmp_path, monkeypatch, [BUSY_LINE])
    with pytest.raises(slurm.SlurmError, match="Socket timed out"):
        slurm.run("scontrol", "update", "nodename=node1", "state=power_down")
    assert len(calls.read_text().splitlines()) == 1


@pytest.mark.parametrize("line", [DEAD_LINE, "scontrol: error: Invalid node state specified"])
def test_an_unreachable_controller_or_a_refusal_fails_at_once(line: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(tmp_path, monkeypatch, [line])
    with pytest.raises(slurm.SlurmError) as raised:
        slurm.run("scontrol", "update", "nodename=node1", "state=power_down", retry_when_busy=True)
    assert str(raised.value) == f"scontrol update nodename=node1 state=power_down: {line}"
    assert len(calls.read_text().splitlines()) == 1
