"""`greengpu cloud` checks its audit log and alert webhook before it launches anything, and the spot webhook
says at start when its certificate has expired or soon will (issue 38). Real files, real certificates."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from greengpu.cli import main
from greengpu.control.cloud.spot_webhook import certificate_warning

ROOT = Path(__file__).parents[2]


def certificate(path: Path, valid_days: float) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "greengpu-spot-webhook.greengpu.svc")])
    now = datetime.datetime.now(datetime.UTC)
    after = now + datetime.timedelta(days=valid_days)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(min(now, after) - datetime.timedelta(days=1))
            .not_valid_after(after).sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_an_expired_or_expiring_certificate_is_one_warning(tmp_path: Path) -> None:
    import time

    expired = certificate_warning(str(certificate(tmp_path / "old.crt", -3)), time.time())
    assert expired is not None and "expired 3 days ago" in expired and "old.crt" in expired
    soon = certificate_warning(str(certificate(tmp_path / "soon.crt", 2)), time.time())
    assert soon is not None and "expires in" in soon
    assert certificate_warning(str(certificate(tmp_path / "fine.crt", 90)), time.time()) is None


def test_healthz_carries_the_warning_while_the_certificate_is_old(tmp_path: Path) -> None:
    """A real TLS server on loopback with a certificate that expired yesterday: /healthz stays 200 (the
    webhook serves and fails open) and says why it should not be trusted for long."""
    import ssl
    import urllib.request

    from greengpu.control.cloud.spot_webhook import WebhookServer, tls_context

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now - datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = WebhookServer("127.0.0.1", 0, tls_context(str(cert_file), str(key_file)), lambda *a: None,
                           cert_file=str(cert_file)).start()
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE  # the client sees what the API server would
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{server.port}/healthz", context=client, timeout=10) as answer:
            assert answer.status == 200 and "expired" in answer.headers["Warning"]
    finally:
        server.stop()


@pytest.mark.parametrize("extra, says", [
    (["--audit", "{tmp}"], "--audit"),
    (["--audit", "/proc/self/cloud-audit.jsonl"], "--audit"),
    (["--alert-webhook", "not a url"], "--alert-webhook"),
])
def test_cloud_refuses_an_audit_it_cannot_write_before_launching(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str) -> None:
    launched = tmp_path / "launched"
    cluster = ROOT / "examples" / "lab-a100.cluster.yaml"
    argv = ["cloud", "--cluster", str(cluster), *[e.replace("{tmp}", str(tmp_path)) for e in extra]]
    if "--audit" not in extra:
        argv += ["--audit", str(tmp_path / "audit.jsonl")]
    code = main([*argv, "resume", "cloud-1"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not launched.exists()
