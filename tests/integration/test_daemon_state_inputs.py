"""Bad state files and flags of `greengpu daemon` and `greengpu agent` (issue 38): one line naming the file,
exit 2, no traceback, nothing written; torn journal lines never eat the next record; a node still
suspending at stop gets its GPUs back to default; the agent exits when NVML cannot start."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from inventories import SITE

from greengpu.cli import main

A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")


def inventory(path: Path, nodes: str = "n[1-2]") -> Path:
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"{nodes}\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 8}\n")
    return path


def daemon(capsys: pytest.CaptureFixture[str], cluster: Path, state: Path | str, *extra: str) -> tuple[int, str]:
    code = main(["daemon", "--backend", "fake", "--cluster", str(cluster), "--state", str(state), "--once",
                 "--listen", "127.0.0.1:0", *extra])
    return code, capsys.readouterr().err


def one_line(code: int, err: str, says: str) -> None:
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_backend_is_required_and_real_needs_a_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = inventory(tmp_path / "c.yaml")
    code = main(["daemon", "--cluster", str(cluster), "--state", str(tmp_path / "s"), "--once"])
    one_line(code, capsys.readouterr().err, "--backend")
    code = main(["daemon", "--backend", "real", "--cluster", str(cluster), "--state", str(tmp_path / "s"), "--once"])
    one_line(code, capsys.readouterr().err, "--source")
    code = main(["daemon", "--backend", "real", "--source", "fake", "--cluster", str(cluster), "--state",
                 str(tmp_path / "s"), "--once"])
    one_line(code, capsys.readouterr().err, "--source fake")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("case", ["file", "proc", "lock-dir", "damaged-db", "text-db", "fake-cluster", "fake-nvml",
                                  "newer-schema"])
def test_a_bad_state_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    cluster = inventory(tmp_path / "c.yaml")
    state = tmp_path / "state"
    says = str(state)
    if case == "file":
        state.write_text("x")
    elif case == "proc":
        state, says = Path("/proc/self/greengpu"), "/proc"
    elif case == "lock-dir":
        (state / "daemon.lock").mkdir(parents=True)
        says = "daemon.lock"
    elif case in ("damaged-db", "text-db"):
        state.mkdir()
        (state / "daemon.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200 if case == "damaged-db"
                                         else b"hello, not a database\n" * 20)
        says = "daemon.db"
    elif case in ("fake-cluster", "fake-nvml", "newer-schema"):
        assert daemon(capsys, cluster, state)[0] == 0
        if case == "fake-cluster":
            (state / "fake-cluster.json").write_text('{"nodes": [{"name": "n1", "pow')
            says = "fake-cluster.json"
        elif case == "fake-nvml":
            (state / "nvml-n1.json").write_text("[]")
            says = "nvml-n1.json"
        else:
            with sqlite3.connect(state / "daemon.db") as db:
                db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
            says = "schema_version"
    before = sorted(p.name for p in state.iterdir()) if state.is_dir() and case != "proc" else None
    one_line(*daemon(capsys, cluster, state), says)
    if before is not None:
        assert sorted(p.name for p in state.iterdir()) == before  # nothing made


def test_a_foreign_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cluster = inventory(tmp_path / "c.yaml")
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "daemon.db") as db:
        db.execute("CREATE TABLE invoices (id INTEGER, amount REAL)")
        db.execute("INSERT INTO invoices VALUES (1, 9.5)")
    db.close()
    before = (state / "daemon.db").read_bytes()
    one_line(*daemon(capsys, cluster, state), "another program's SQLite database")
    assert (state / "daemon.db").read_bytes() == before
    assert sorted(p.name for p in state.iterdir()) == ["daemon.db"]


def test_a_state_reused_with_another_cluster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    assert daemon(capsys, inventory(tmp_path / "a.yaml"), state)[0] == 0
    code, err = daemon(capsys, inventory(tmp_path / "b.yaml", "m[1-3]"), state)
    one_line(code, err, "b.yaml")
    assert "a.yaml" in err and "KeyError" not in err
    assert daemon(capsys, tmp_path / "a.yaml", state)[0] == 0  # its own cluster still starts


def test_token_files_are_read_bounded_and_an_open_one_is_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = inventory(tmp_path / "c.yaml")
    for bad in ("/dev/zero", str(tmp_path)):
        one_line(*daemon(capsys, cluster, tmp_path / "s", "--token-file", bad), "--token-file")
    big = tmp_path / "big"
    big.write_text("x" * 100_000)
    one_line(*daemon(capsys, cluster, tmp_path / "s", "--token-file", str(big)), "longer than")
    token = tmp_path / "token"
    token.write_text("s3cret-token-of-sixteen+\n")
    token.chmod(0o644)
    code, err = daemon(capsys, cluster, tmp_path / "s", "--token-file", str(token))
    assert code == 0 and "readable by others" in err and "chmod 600" in err
    token.chmod(0o600)
    code, err = daemon(capsys, cluster, tmp_path / "s", "--token-file", str(token))
    assert code == 0 and "readable by others" not in err


def test_a_torn_audit_line_does_not_eat_the_next_record(tmp_path: Path) -> None:
    from greengpu.control.daemon.audit import AuditLog

    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.write({"kind": "first"})
    with (tmp_path / "audit.jsonl").open("a") as handle:
        handle.write('{"kind": "set_power_limit", "node": "n1", "det')  # the writer died mid-line
    audit.write({"kind": "reset", "node": "n1"})
    audit.write_many([{"kind": "more"}])
    assert [r["kind"] for r in audit.records()] == ["first", "reset", "more"]


def test_a_torn_fake_nvml_write_does_not_eat_the_next_one(tmp_path: Path) -> None:
    from greengpu.backends.fake_nvml import FakeNvml, make_gpus
    from greengpu.backends.nvml import NvmlBackend

    state = tmp_path / "nvml.json"
    backend = NvmlBackend(lib=FakeNvml(make_gpus("2xA100"), state_path=state))
    backend.open()
    backend.set_power_limit_w(0, 100.0)  # the first write goes to the file
    backend.set_power_limit_w(1, 150.0)  # then to the write log
    with state.with_suffix(".json.writes").open("a") as handle:
        handle.write('{"gpu": 0, "limit_w": 2')  # killed mid-line
    backend.reset_power_limit(0)  # this reset must survive
    assert [g.limit_w for g in FakeNvml.stored_gpus(state)] == [400.0, 150.0]


def test_a_node_still_suspending_at_stop_gets_its_gpus_back(tmp_path: Path) -> None:
    from greengpu.config.inventory import load_cluster
    from greengpu.control.fakes.fake_cluster import FakeCluster
    from greengpu.model import PowerState

    state = tmp_path / "state"
    state.mkdir()
    body = FakeCluster(load_cluster(inventory(tmp_path / "c.yaml")), [], state, start_s=1000.0)
    body.nvml["n1"].set_power_limit_w(0, 100.0)
    body.nodes["n1"].power = PowerState.SUSPENDING.value
    lines = body.release_gpus("daemon stopping")
    assert body.gpu_limit_w("n1", 0) == 400.0 and any("n1 GPU 0" in line for line in lines)


def test_the_agent_exits_with_one_line_when_nvml_cannot_start(tmp_path: Path) -> None:
    """It used to hang in stop() (shutdown() of a server that never served): its pod stayed Running."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    result = subprocess.run([sys.executable, "-m", "greengpu.cli", "agent", "--backend", "fake", "--fake-gpus",
                             "0xA100", "--journal", str(tmp_path / "j.jsonl"), "--listen", "127.0.0.1:0",
                             "--interval-s", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "no GPU" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("url", ["not a url", "greengpu-daemon:9475", "ftp://greengpu-daemon/", "http://:9475"])
def test_the_agent_refuses_a_waiting_from_that_is_not_a_url_before_touching_a_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str) -> None:
    """Issue 36: `--waiting-from 'not a url'` made every turn "the daemon is unreachable", so every cap lifted
    for good without a word. Now one line and exit 2, and no GPU written (no journal, no fake NVML state)."""
    journal, state = tmp_path / "j.jsonl", tmp_path / "nvml.json"
    code = main(["agent", "--backend", "fake", "--fake-state", str(state), "--journal", str(journal), "--once",
                 "--listen", "127.0.0.1:0", "--waiting-from", url])
    one_line(code, capsys.readouterr().err, "--waiting-from")
    assert not journal.exists() and not state.exists()


def _read_only_mounts() -> bool:
    """Whether this process may mount a read-only tmpfs in a mount namespace of its own (root, as in CI)."""
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o ro,size=1m tmpfs /mnt"], capture_output=True, timeout=10, check=False)
    return probe.returncode == 0


def test_a_state_directory_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """Root may write through any permission bits, so an unwritable state is a read-only file system: a tmpfs
    mounted read-only over the state directory, in a mount namespace of the test's own (nothing else sees it)."""
    if not _read_only_mounts():
        if os.environ.get("CI"):
            pytest.fail("CI runs as root and must be able to mount a read-only tmpfs in its own namespace")
        pytest.skip("mounting a read-only tmpfs needs root (unshare -m); CI runs it")
    cluster = inventory(tmp_path / "c.yaml")
    state = tmp_path / "state"
    state.mkdir()
    script = ('mount -t tmpfs -o ro,size=1m tmpfs "$1" && shift && exec "$@"')
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(state), sys.executable, "-m",
            "greengpu.cli", "daemon", "--backend", "fake", "--cluster", str(cluster), "--state", str(state), "--once",
            "--listen", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    one_line(done.returncode, done.stderr, str(state))
    assert "read-only" in done.stderr.lower() or "writ" in done.stderr.lower(), done.stderr
    assert list(state.iterdir()) == []  # the real directory under the mount: nothing was written
