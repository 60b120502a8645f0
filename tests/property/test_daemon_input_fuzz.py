"""The live programs' flags and state files, fuzzed through the command line's exit path (issue 38): the
daemon, the agent, `cloud` and the spot webhook. Any input gives exit 0 (or 1, a runtime failure, in one
line), or exactly one line and exit 2; never a traceback, never a hang (every call has a time bound), and
never a wrong acceptance: an input that a flag's contract refuses (a webhook that is not a URL, a token
under 16 characters, a state file that is not what it should be) must not start anything.

In process through `main` where the program returns (daemon and agent `--once`, `cloud`), a subprocess with
a timeout for the spot webhook (which serves until a signal). CI (CI=true) tries a fixed set of inputs;
the whole file takes well under a minute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from inventories import SITE
from test_input_fuzz import ODD_VALUES, _text_edits, assert_clean, edit_text, fuzz, run_cli

ROOT = Path(__file__).parents[2]
NODE = ("{gpus: 2, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
        "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
DAEMON_FLAGS = ["--listen", "--interval-s", "--webhook", "--tick-deadline-s", "--policy", "--source", "--backend",
                "--trace-format", "--seed", "--lease-name", "--state", "--token-file", "--ledger"]
STATE_FILES = ["daemon.db", "fake-cluster.json", "nvml-n1.json", "nvml-n1.json.writes", "audit.jsonl",
               "daemon.lock"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An inventory and a state directory that one good `--once` tick made (each input gets a copy)."""
    root = tmp_path_factory.mktemp("daemon-fuzz")
    (root / "cluster.yaml").write_text(SITE + f"node_types:\n  g2: {NODE}\nnodes:\n  - {{name: \"n[1-2]\", "
                                       "type: g2}\ntenants:\n  a: {quota_gpus: 4}\n")
    code, _, err = run_cli("daemon", "--backend", "fake", "--cluster", str(root / "cluster.yaml"), "--state",
                           str(root / "good"), "--once", "--listen", "127.0.0.1:0")
    assert code == 0, err
    yield root


def _fresh(site: Path) -> Path:
    state = site / "try"
    shutil.rmtree(state, ignore_errors=True)
    if state.is_file() or state.is_symlink():
        state.unlink()
    # Without the WAL sidecars: a mutated daemon.db beside the WAL of the good one is read through the WAL.
    shutil.copytree(site / "good", state, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    return state


def _daemon(site: Path, state: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(site / "cluster.yaml"), "--state",
                   str(state), "--once", "--listen", "127.0.0.1:0", *extra)


def _refused_by_contract(flag: str, value: str) -> bool:
    """Whether the flag's documented contract refuses `value` (an acceptance of it is wrong)."""
    if flag == "--webhook":
        try:
            parts = urlsplit(value)
            return parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value)
        except ValueError:
            return True
    if flag == "--backend":
        return value not in ("fake", "real")
    return False


@fuzz(25)
@given(flag=st.sampled_from(DAEMON_FLAGS), value=ODD_VALUES)
@example(flag="--interval-s", value="4611686019")  # once an OverflowError from the tick's deadline wait
def test_daemon_flags(site: Path, flag: str, value: str) -> None:
    state = _fresh(site)
    if flag == "--token-file":
        token = site / "token"
        token.write_text(value)
        token.chmod(0o600)
        value = str(token)
    if flag in ("--state", "--ledger"):
        # Kept inside the test's directory (the tests may run as root: never a file under / or in the checkout).
        value = str(site / "x" / (value.replace("\x00", "").replace("..", "_").lstrip("/") or "."))
    if flag == "--state":
        shutil.rmtree(site / "x", ignore_errors=True)
        code, out, err = run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(site / "cluster.yaml"),
                                 "--once", "--listen", "127.0.0.1:0", "--state", value)
    else:
        code, out, err = _daemon(site, state, flag, value)
    assert_clean(code, err, allowed=(0, 1, 2))
    if code != 2:
        assert not _refused_by_contract(flag, value), f"{flag} {value!r} was accepted"
        if flag == "--token-file":
            text = Path(value).read_text(errors="replace").strip()
            assert len(text) >= 16, f"a token of {len(text)} characters was accepted"


@fuzz(25)
@given(name=st.sampled_from(STATE_FILES), edits=_text_edits(), whole=st.booleans(), raw=st.binary(max_size=64))
@example(name="daemon.db", edits=[(12287, 0, "nan")], whole=False, raw=b"")  # a page past those the check read
def test_daemon_state_files(site: Path, name: str, edits: list[tuple[int, int, str]], whole: bool,
                            raw: bytes) -> None:
    state = _fresh(site)
    path = state / name
    if name == "daemon.lock" and whole:
        path.unlink()
        path.mkdir()
    elif whole:
        path.write_bytes(raw)
    else:
        before = path.read_bytes() if path.exists() else b""
        path.write_bytes(edit_text(before.decode("latin-1"), edits).encode("latin-1", errors="replace"))
    before_db = (state / "daemon.db").read_bytes() if name == "daemon.db" else None
    code, _, err = _daemon(site, state)
    assert_clean(code, err, allowed=(0, 1, 2))
    if name == "daemon.lock" and whole:
        assert code == 2, "a directory as daemon.lock was accepted"
    if name == "fake-cluster.json" and code != 2:
        import json

        json.loads(path.read_text())  # anything accepted was JSON
    if before_db is not None and code == 2:
        assert (state / "daemon.db").read_bytes() == before_db, "a refused daemon.db was written"


@fuzz(15)
@given(flag=st.sampled_from(["--fake-gpus", "--fake-busy", "--interval-s", "--stale-after-s", "--listen",
                             "--nonbinding-after-s", "--policy", "--class-source", "--classes"]), value=ODD_VALUES)
def test_agent_flags(site: Path, flag: str, value: str) -> None:
    journal = site / "agent.jsonl"
    journal.unlink(missing_ok=True)
    code, _, err = run_cli("agent", "--backend", "fake", "--once", "--journal", str(journal), "--listen",
                           "127.0.0.1:0", *(["--class-source", "local"] if flag != "--class-source" else []),
                           flag, value)
    if code == 0 and flag == "--fake-gpus":
        assert value.strip(), "an empty GPU spec was accepted"
    assert_clean(code, err, allowed=(0, 1, 2))
    if code == 1:
        assert err.count("\n") <= 2, err  # the agent's own start-up line and the reason


@fuzz(10)
@given(audit=ODD_VALUES, webhook=st.one_of(st.none(), ODD_VALUES))
def test_cloud_flags(site: Path, audit: str, webhook: str | None) -> None:
    audit_path = site / "cloud" / (audit.replace("\x00", "").replace("/", "_") or "a")
    extra = ["--alert-webhook", webhook] if webhook is not None else []
    code, _, err = run_cli("cloud", "--cluster", str(ROOT / "examples" / "burst-cloud.cluster.yaml"), "--audit",
                           str(audit_path), *extra, "resume", "no-such-node")
    assert_clean(code, err, allowed=(1, 2))
    if webhook is not None and _refused_by_contract("--webhook", webhook):
        assert code == 2 and "--alert-webhook" in err, err


@fuzz(6)
@given(edits=_text_edits(), listen=st.sampled_from(["127.0.0.1:0", "nowhere", "127.0.0.1:99999", ":", "[::1]:0"]))
def test_spot_webhook_certificates_and_listen(site: Path, edits: list[tuple[int, int, str]], listen: str) -> None:
    """The webhook serves until a signal: a subprocess, stopped after 3 s; one that serves must have had a
    certificate and key that load (checked here with the same ssl call)."""
    import ssl

    cert, key = _certificate(site)
    bad = site / "bad.crt"
    bad.write_text(edit_text(cert.read_text(), edits))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "greengpu.cli", "spot", "webhook", "--listen", listen, "--cert", str(bad),
            "--key", str(key), "--cluster", str(ROOT / "examples" / "burst-cloud.cluster.yaml")]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = process.communicate(timeout=3)
    except subprocess.TimeoutExpired:
        process.terminate()
        _, err = process.communicate(timeout=10)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(bad), str(key))  # it served: the files must load (else a wrong acceptance)
        assert "Traceback" not in err, err
        return
    assert "Traceback" not in err, err
    assert process.returncode in (1, 2) and err.count("\n") == 1, (process.returncode, err)


def _certificate(site: Path) -> tuple[Path, Path]:
    cert, key = site / "tls.crt", site / "tls.key"
    if cert.exists():
        return cert, key
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "greengpu-spot-webhook.greengpu.svc")])
    now = datetime.datetime.now(datetime.UTC)
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=90)).sign(private, hashes.SHA256()))
    cert.write_bytes(built.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert, key
