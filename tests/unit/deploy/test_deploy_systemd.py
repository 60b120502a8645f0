"""The shipped systemd units load cleanly (`systemd-analyze verify`, no warning) and stay hardened
(`systemd-analyze security --offline`), as .ci/run checks them, plus the daemon unit's own promises:
Type=notify with a watchdog, no capability, not root, its state directory, and the token drop-in."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

import pytest
from deploy_tools import DEPLOY, greengpu_command, option_names, option_variable, require_tool

SYSTEMD = DEPLOY / "systemd"
DAEMON_UNIT = SYSTEMD / "greengpu-daemon.service"
TOKEN_DROP_IN = SYSTEMD / "greengpu-daemon.service.d" / "token.conf"
EXPOSURE_BOUND = 4.0
"""What .ci/run allows every shipped unit (`--threshold=39`: exposure 3.9 and under)."""
DAEMON_EXPOSURE_BOUND = 2.0
"""The daemon needs the network and its state directory, nothing else: no device, no capability."""


def _unit_root(tmp_path: Path) -> Path:
    """A root with systemd's own units (ours order against them) and a greengpu executable to find."""
    root = tmp_path / "root"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "etc/systemd").mkdir(parents=True)
    (root / "usr/lib/systemd").mkdir(parents=True)
    for source in (Path("/lib/systemd/system"), Path("/usr/lib/systemd/system")):
        if source.is_dir():
            subprocess.run(["cp", "-r", str(source), str(root / "usr/lib/systemd/")], check=True)
            break
    executable = root / "usr/local/bin/greengpu"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    subprocess.run(["cp", "-r", str(SYSTEMD), str(root / "etc/systemd/system")], check=True)
    return root


def _read_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive in systemd
    parser.read_string(path.read_text().replace("\\\n", " "))
    return parser


def test_every_shipped_unit_and_drop_in_verifies_without_a_warning(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    root = _unit_root(tmp_path)
    units = sorted(p.name for p in SYSTEMD.iterdir() if p.suffix in (".service", ".timer"))
    assert "greengpu-daemon.service" in units
    result = subprocess.run([analyze, "verify", "--man=no", f"--root={root}",
                             *(f"/etc/systemd/system/{unit}" for unit in units)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_the_verify_check_sees_the_drop_in(tmp_path: Path) -> None:
    """A broken drop-in line is reported: the clean verify above did read the token drop-in."""
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    root = _unit_root(tmp_path)
    drop_in = root / "etc/systemd/system/greengpu-daemon.service.d/token.conf"
    drop_in.write_text(drop_in.read_text() + "LoadCredentialz=x:/y\n")
    result = subprocess.run([analyze, "verify", "--man=no", f"--root={root}",
                             "/etc/systemd/system/greengpu-daemon.service"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert "token.conf" in result.stderr and "LoadCredentialz" in result.stderr, result.stderr


@pytest.mark.parametrize("unit", sorted(p.name for p in SYSTEMD.glob("*.service")))
def test_every_service_is_hardened(unit: str) -> None:
    analyze = require_tool("systemd-analyze", "apt-get install systemd")
    result = subprocess.run([analyze, "security", "--offline=true", str(SYSTEMD / unit)],
                            capture_output=True, text=True, timeout=30, check=False)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert match, result.stdout[-500:] + result.stderr
    exposure = float(match.group(1))
    assert exposure < EXPOSURE_BOUND, (unit, exposure)
    if unit == DAEMON_UNIT.name:
        assert exposure <= DAEMON_EXPOSURE_BOUND, exposure


def test_the_daemon_unit_is_notify_with_a_watchdog_and_no_privilege() -> None:
    service = _read_unit(DAEMON_UNIT)["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    # The watchdog must outlast a whole control interval (default 60 s) and a slow tick.
    assert int(service["WatchdogSec"]) >= 2 * 60
    assert service["User"] not in ("", "root") and service.get("DynamicUser", "no") == "no"
    assert service["CapabilityBoundingSet"] == "" and service["AmbientCapabilities"] == ""
    assert "CAP_SYS_ADMIN" not in DAEMON_UNIT.read_text()
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert service["PrivateDevices"] == "yes"
    assert "ReadWritePaths" not in service  # only its StateDirectory is writable
    assert service["StateDirectory"] == "greengpu/daemon"
    words = service["ExecStart"].split()
    assert words[:2] == ["/usr/local/bin/greengpu", "daemon"]
    assert words[words.index("--state") + 1] == "/var/lib/" + service["StateDirectory"]
    assert words[words.index("--source") + 1] == "slurm" and words[words.index("--backend") + 1] == "real"


def test_the_token_drop_in_hands_the_daemon_a_private_copy_of_the_token() -> None:
    service = _read_unit(TOKEN_DROP_IN)["Service"]
    name, _, source = service["LoadCredential"].partition(":")
    assert source.startswith("/etc/greengpu/")
    # %d is the service's credentials directory: the daemon reads its own copy, the file stays root-only.
    assert service["Environment"] == f"GREENGPU_DAEMON_TOKEN_FILE=%d/{name}"


def test_the_daemon_unit_and_drop_in_name_options_the_command_has() -> None:
    daemon = greengpu_command("daemon")
    exec_start = _read_unit(DAEMON_UNIT)["Service"]["ExecStart"].split()
    assert {word for word in exec_start if word.startswith("--")} <= option_names(daemon)
    variable = _read_unit(TOKEN_DROP_IN)["Service"]["Environment"].split("=", 1)[0]
    assert option_variable(daemon, "--token-file") == variable
    assert option_variable(daemon, "--listen") == "GREENGPU_DAEMON_LISTEN"  # the README's remote-scrape line
