"""`greengpu slurm` and `greengpu check --slurm-conf` at the CLI's exit path: runtime failures are one line
and exit 1 (also in the hooks' log, as Slurm discards their stderr), a suspend never goes ahead when
Slurm cannot be asked, status is readable, and wake-up timings Slurm would cut short are refused.

The failures are real: the real `scontrol` against a slurm.conf whose slurmctld does not listen."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory

from greengpu.cli import main
from greengpu.control.hooks.state_store import StateStore


def _require_scontrol() -> None:
    if shutil.which("scontrol") is None:
        if os.environ.get("CI"):
            pytest.fail("scontrol is missing in CI (apt-get install slurm-wlm)")
        pytest.skip("scontrol not installed (apt-get install slurm-wlm)")


@pytest.fixture
def dead_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A slurm.conf naming a controller port where nothing listens (connect refused at once)."""
    _require_scontrol()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=dead\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n"
                    "AuthType=auth/none\nMessageTimeout=1\nNodeName=node[1-2] CPUs=1 State=UNKNOWN\n"
                    "PartitionName=p Nodes=node[1-2] Default=YES\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


@pytest.fixture
def options(tmp_path: Path, udp: socket.socket) -> list[str]:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"gpu4": a100_type(gpus=4, boot_s=120)},
                                [wol_node("node[1-2]", "gpu4", "02:00:5e:00:00:01", udp.getsockname()[1])])
    return ["slurm", "--cluster", str(inventory), "--state", str(tmp_path / "state.db"),
            "--log", str(tmp_path / "hooks.log"), "--suspend-command", f"touch {tmp_path}/suspended-{{node}}"]


@pytest.mark.parametrize("command", [["power-down", "node1"], ["power-up", "node1"], ["status"]])
def test_no_reachable_slurmctld_is_one_line_and_exit_1(command: list[str], options: list[str], dead_slurm: Path,
                                                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main([*options, *command])
    err = capsys.readouterr().err
    if command == ["status"]:  # status reads greengpu's own state only: no Slurm needed
        assert code == 0 and err == ""
        return
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"greengpu: slurm {command[0]}: scontrol ")
    assert "Unable to contact slurm controller" in err
    assert f"greengpu slurm {command[0]} failed: scontrol" in (tmp_path / "hooks.log").read_text()


def test_verify_without_slurmctld_is_one_line_and_exit_1(options: list[str], dead_slurm: Path,
                                                          capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([*options, "resume", "node1"]) == 0  # a wake-up under verification: verify must ask Slurm
    capsys.readouterr()
    assert main([*options, "verify"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("greengpu: slurm verify: scontrol ")


def test_suspend_does_not_go_ahead_when_scontrol_fails(options: list[str], dead_slurm: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*options, "suspend", "node[1-2]"]) == 1
    assert not list(tmp_path.glob("suspended-*"))  # no suspend command ran
    assert StateStore(tmp_path / "state.db").records() == []  # and nothing says the nodes sleep
    log_text = (tmp_path / "hooks.log").read_text()
    assert "SuspendProgram called for node[1-2]" in log_text
    assert "refusing to suspend node[1-2]: cannot read their states from Slurm" in log_text
    assert capsys.readouterr().err.count("\n") == 1


def test_a_hook_refusing_bad_input_says_so_in_its_log(options: list[str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*options, "resume", "node9"]) == 2
    assert "node9: not in the inventory" in capsys.readouterr().err
    assert "greengpu slurm resume refused: node9: not in the inventory" in (tmp_path / "hooks.log").read_text()


@pytest.mark.parametrize("command", [["status"], ["verify"], ["resume", "node9"]])
def test_without_a_log_file_bad_input_is_one_line_on_stderr(command: list[str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Run by hand (no --log), the log is stderr: the refusal is said once, by the command's own line."""
    bad = tmp_path / "cluster.yaml"
    bad.write_text("nodes: [1")
    assert main(["slurm", "--cluster", str(bad), "--state", str(tmp_path / "state.db"), *command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"greengpu: {bad}:1: invalid YAML"), err


def test_resume_fail_program_fails_the_wake_up_and_alerts(options: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*options, "resume", "node2"]) == 0
    assert main([*options, "resume-failed", "node2"]) == 0
    assert [(r.node, r.state) for r in StateStore(tmp_path / "state.db").records()] == [("node2", "failed")]
    log_text = (tmp_path / "hooks.log").read_text()
    assert "ALERT node2: did not wake (Slurm ResumeFailProgram: not registered by ResumeTimeout) after 1 wake-up" \
        in log_text
    capsys.readouterr()
    assert main([*options, "verify"]) == 0  # nothing left to verify: no Slurm needed
    assert capsys.readouterr().out == ""


def test_status_is_readable_empty_and_full(options: list[str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*options, "status"]) == 0
    assert capsys.readouterr().out == "no node put to sleep or being woken by greengpu\n"
    StateStore(tmp_path / "state.db").record_suspend("node1", 1_790_000_000.0, "Slurm SuspendProgram")
    assert main([*options, "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("node1            asleep   since 2026-09-21 14:13:20 UTC (")
    assert " ago)  Slurm SuspendProgram" in out and "1790000000" not in out
    assert main([*options, "status", "--json"]) == 0  # the JSON keeps the epoch seconds
    assert '"since_s": 1790000000.0' in capsys.readouterr().out


def _check(tmp_path: Path, boot_s: float, resume_timeout: str | None, policy: str,
           capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    inventory = write_inventory(tmp_path / "c.yaml", {"big": a100_type(gpus=8, boot_s=boot_s)},
                                [wol_node("gpu[1-2]", "big", "02:00:5e:00:00:01", 9)])
    args = ["check", "--cluster", str(inventory), "--policy", policy, "--json"]
    if resume_timeout is not None:
        conf = tmp_path / "slurm.conf"
        conf.write_text(f"# test\nresumetimeout = {resume_timeout}  # seconds\nSuspendTime=60\n")
        args += ["--slurm-conf", str(conf)]
    code = main(args)
    return code, capsys.readouterr().err


def test_check_refuses_wake_retries_that_slurm_would_cut_short(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[3]
    # The default policy retries 3 times after 600 s each: the old shipped ResumeTimeout=600 gave up first.
    code, err = _check(tmp_path, 300, "600", "default", capsys)
    assert code == 2 and err.count("\n") == 1
    assert "later than Slurm's ResumeTimeout=600; raise ResumeTimeout to 2723" in err
    # The shipped slurm.conf lines fit the default policy for boots up to 457 s.
    shipped = (repo / "deploy" / "slurm" / "slurm.conf.greengpu").read_text()
    assert "\nResumeTimeout=2880\n" in shipped
    assert _check(tmp_path, 450, "2880", "default", capsys) == (0, "")
    # A wake timeout shorter than a boot retries every healthy wake-up: refused with or without Slurm.
    code, err = _check(tmp_path, 700, None, "default", capsys)
    assert code == 2 and "sleep.wake_timeout_s 600 s is shorter than node type big's boot_s 700 s" in err
    code, err = _check(tmp_path, 300, "ten", "default", capsys)
    assert code == 2 and "ResumeTimeout='ten' is not a whole number of seconds" in err


def test_the_shipped_hook_wrappers_call_commands_that_exist() -> None:
    """Each wrapper in deploy/slurm runs `greengpu slurm ... SUBCOMMAND "$1"` with options the group has."""
    from greengpu.cli import slurm

    deploy = Path(__file__).resolve().parents[3] / "deploy" / "slurm"
    wrappers = sorted(deploy.glob("greengpu-slurm-*"))
    assert [w.name for w in wrappers] == ["greengpu-slurm-resume", "greengpu-slurm-resume-fail",
                                          "greengpu-slurm-suspend"]
    options = {opt for param in slurm.params for opt in getattr(param, "opts", [])}
    for wrapper in wrappers:
        words = wrapper.read_text().replace("\\\n", " ").split()
        start = words.index("/usr/local/bin/greengpu")
        assert words[start + 1] == "slurm" and words[-1] == '"$1"'
        assert words[-2] in slurm.commands, (wrapper.name, words[-2])
        assert {w for w in words[start + 2:-2] if w.startswith("--")} <= options
    conf = (deploy / "slurm.conf.greengpu").read_text()
    for key in ("SuspendProgram", "ResumeProgram", "ResumeFailProgram"):
        path = next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith(f"{key}="))
        assert (deploy / Path(path).name).exists(), key
    assert "\nReconfigFlags=KeepPowerSaveSettings\n" in conf and "\nDebugFlags=Power\n" in conf
