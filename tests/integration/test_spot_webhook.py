"""The spot webhook over real HTTPS on loopback: a real AdmissionReview (admission.k8s.io/v1) is POSTed to
`WebhookServer` (a self-signed certificate made here with `cryptography`), the JSONPatch in its answer is
decoded and applied to the pod (the `jsonpatch` library, RFC 6902), and the pod that comes out requires
the capacity type the decision chose, with its own affinity kept. Pods that are not GPU pods, that chose
a capacity type themselves, or whose annotations cannot be read are allowed unchanged, and so is every
pod when the decision raises (fail open). The decision is greengpu.spot.decide's, with the example
inventory's prices bound as the command binds them."""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from greengpu.cli import main
from greengpu.commands.spot import bind_decision
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.cloud.spot_webhook import WebhookServer, answer, tls_context
from greengpu.spot.decide import CapacityKind, SpotJobFacts

NOW_S = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=datetime.UTC).timestamp()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "burst-cloud.cluster.yaml"
DECIDE = bind_decision(load_cluster(EXAMPLE), load_policy("default"))
"""The real spot decision (greengpu.spot.decide) with the example inventory's cheapest spot and on-demand
prices and the default policy bound, as `greengpu spot webhook --cluster ... --policy default` binds it."""


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, as a cluster's cert-manager would issue."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "greengpu-spot-webhook.greengpu.svc")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=90))  # under 14 days: a warning line first
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _certificate(tmp_path_factory.mktemp("tls"))


class Webhook:
    def __init__(self, server: WebhookServer, cert_file: Path) -> None:
        self.server = server
        self.client = ssl.create_default_context(cafile=str(cert_file))  # verifies the chain and the host name

    def post(self, body: bytes, path: str = "/mutate") -> tuple[int, bytes]:
        request = urllib.request.Request(f"https://localhost:{self.server.port}{path}", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.client, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def review(self, pod: dict[str, Any], uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002") -> dict[str, Any]:
        status, body = self.post(json.dumps(admission_review(pod, uid)).encode())
        assert status == 200, body
        answer = json.loads(body)
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == uid and answer["response"]["allowed"] is True
        return dict(answer["response"])


def admission_review(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """What the API server sends for a pod being created (admission.k8s.io/v1, as in the Kubernetes docs)."""
    metadata = pod["metadata"] if isinstance(pod.get("metadata"), dict) else {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": metadata.get("namespace", "default"), "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "groups": ["system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def gpu_pod(annotations: dict[str, str], gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "train-", "namespace": "research", "annotations": annotations},
            "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                     "restartPolicy": "Never", **spec}}


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The pod after the webhook's JSONPatch, applied as the API server does."""
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, operations)
    return result


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return terms


def capacity_requirement(value: str) -> dict[str, Any]:
    return {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [value]}


@pytest.fixture(scope="module")
def webhook(certificate: tuple[Path, Path]) -> Iterator[Webhook]:
    server = WebhookServer("127.0.0.1", 0, tls_context(*map(str, certificate)), DECIDE,
                           clock=lambda: NOW_S).start()
    yield Webhook(server, certificate[0])
    server.stop()


TRAINING = {"greengpu.io/class": "training", "greengpu.io/interruptible": "true",
            "greengpu.io/checkpoint-interval": "30m", "greengpu.io/expected-runtime": "6h"}


def test_a_checkpointing_training_pod_is_sent_to_spot(webhook: Webhook) -> None:
    pod = gpu_pod(TRAINING)
    response = webhook.review(pod)
    placed = patched(pod, response)
    assert required_terms(placed) == [{"matchExpressions": [capacity_requirement("spot")]}]
    assert placed["metadata"]["annotations"]["greengpu.io/capacity-type"] == "spot"
    assert placed["spec"]["containers"] == pod["spec"]["containers"]  # nothing else changed


@pytest.mark.parametrize("annotations", [
    {"greengpu.io/class": "inference"},
    {**TRAINING, "greengpu.io/class": "interactive"},
    {**TRAINING, "greengpu.io/interruptible": "false"},
    {**{key: value for key, value in TRAINING.items() if key != "greengpu.io/checkpoint-interval"},
     "greengpu.io/expected-runtime": "100h"},  # no checkpoints: 100 h at risk makes spot's rework dearer
    {**TRAINING, "greengpu.io/deadline": "2026-12-01T06:05:00Z"},  # 5 minutes of slack: less than the
                                                                  # default's 10-minute restart after an interruption
], ids=["inference", "interactive", "not-interruptible", "no-checkpoints", "tight-deadline"])
def test_work_that_must_not_be_put_at_risk_goes_to_on_demand(webhook: Webhook, annotations: dict[str, str]) -> None:
    pod = gpu_pod(annotations)
    placed = patched(pod, webhook.review(pod))
    assert required_terms(placed) == [{"matchExpressions": [capacity_requirement("on-demand")]}]


def test_the_pods_own_node_affinity_is_kept_in_every_term(webhook: Webhook) -> None:
    own = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100-SXM4-40GB"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod = gpu_pod({**TRAINING, "greengpu.io/deadline": "2026-12-03T00:00:00Z"}, affinity=copy.deepcopy(own))
    placed = patched(pod, webhook.review(pod))
    terms = required_terms(placed)
    assert terms[0]["matchExpressions"] == [*own["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"], capacity_requirement("spot")]
    assert terms[1] == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}],
                        "matchExpressions": [capacity_requirement("spot")]}
    assert placed["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == \
        own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert placed["spec"]["affinity"]["podAntiAffinity"] == own["podAntiAffinity"]


def test_a_pod_without_annotations_or_affinity_gets_both(webhook: Webhook) -> None:
    pod = gpu_pod({})
    del pod["metadata"]["annotations"]
    placed = patched(pod, webhook.review(pod))
    assert placed["metadata"]["annotations"] == {"greengpu.io/capacity-type": "on-demand"}  # not interruptible
    assert required_terms(placed) == [{"matchExpressions": [capacity_requirement("on-demand")]}]


@pytest.mark.parametrize(("pod", "why"), [
    (gpu_pod(TRAINING, gpus=0), "not a GPU pod"),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
      "spec": {"containers": [{"name": "web", "image": "nginx"}]}}, "not a GPU pod"),
    (gpu_pod(TRAINING, nodeSelector={"karpenter.sh/capacity-type": "on-demand"}), "chose its capacity"),
    (gpu_pod(TRAINING, nodeSelector={"eks.amazonaws.com/capacityType": "SPOT"}), "chose its capacity"),
    (gpu_pod(TRAINING, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "NotIn",
                                                     "values": ["spot"]}]}]}}}), "chose its capacity"),
], ids=["zero-gpus", "no-gpus", "selector", "eks-selector", "affinity"])
def test_pods_left_alone_are_allowed_unchanged(webhook: Webhook, pod: dict[str, Any], why: str) -> None:
    response = webhook.review(pod)
    assert "patch" not in response and "patchType" not in response, why
    assert "warnings" not in response


def test_a_pod_no_cloud_pool_may_take_is_allowed_unchanged() -> None:
    """Only a spot pool, and an inference pod (never on spot): the decision has no cloud capacity for it."""
    from greengpu.spot.decide import PoolPrice, cloud_capacity_for

    policy = load_policy("default").spot
    spot_only = PoolPrice(price_per_gpu_hour=1.0, interruptions_per_hour=0.05, notice_s=120.0)

    def decide(facts: SpotJobFacts) -> CapacityKind | None:
        return cloud_capacity_for(facts, spot_only, None, policy)

    body, _ = answer(admission_review(gpu_pod({"greengpu.io/class": "inference"}), "uid-9"), decide, NOW_S)
    assert body["response"]["allowed"] is True and "patch" not in body["response"]
    body, _ = answer(admission_review(gpu_pod(TRAINING), "uid-10"), decide, NOW_S)
    assert "patch" in body["response"]  # the same webhook sends a training pod to that spot pool


def test_an_unreadable_annotation_leaves_the_pod_unchanged_with_a_warning(webhook: Webhook) -> None:
    response = webhook.review(gpu_pod({**TRAINING, "greengpu.io/checkpoint-interval": "every now and then"}))
    assert "patch" not in response
    assert response["warnings"] == ["greengpu: not placed on spot or on-demand capacity: greengpu.io/checkpoint-"
                                    "interval: not a duration (seconds, or a number with s, m, h or d): 'every now "
                                    "and then'"]


def test_an_internal_error_allows_the_pod_unchanged(certificate: tuple[Path, Path],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    def broken(facts: SpotJobFacts) -> CapacityKind | None:
        raise RuntimeError("price table vanished")

    server = WebhookServer("127.0.0.1", 0, tls_context(*map(str, certificate)), broken).start()
    try:
        response = Webhook(server, certificate[0]).review(gpu_pod(TRAINING))
    finally:
        server.stop()
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert "error deciding on pod research/train-" in caplog.text and "price table vanished" in caplog.text


def test_requests_that_are_not_admission_reviews(webhook: Webhook) -> None:
    assert webhook.post(b"{not json")[0] == 400
    assert webhook.post(json.dumps({"kind": "AdmissionReview", "request": {}}).encode())[0] == 400
    assert webhook.post(b"{}", path="/elsewhere")[0] == 404
    with urllib.request.urlopen(f"https://localhost:{webhook.server.port}/healthz", context=webhook.client,
                                timeout=10) as answer:
        assert answer.read() == b"ok\n"


def test_the_command_refuses_bad_certificate_files_in_one_line(tmp_path: Path, certificate: tuple[Path, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cluster = str(Path(__file__).resolve().parents[2] / "examples" / "burst-cloud.cluster.yaml")
    (tmp_path / "garbage.pem").write_text("not a key")
    for cert, key in ((str(tmp_path / "missing.crt"), str(certificate[1])), (str(certificate[0]),
                                                                             str(tmp_path / "garbage.pem"))):
        code = main(["spot", "webhook", "--listen", "127.0.0.1:0", "--cert", cert, "--key", key, "--cluster", cluster])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("greengpu: --cert "), err
    code = main(["spot", "webhook", "--listen", "localhost", "--cert", str(certificate[0]), "--key",
                 str(certificate[1]), "--cluster", cluster])
    assert code == 2 and "--listen: 'localhost': expected HOST:PORT" in capsys.readouterr().err


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=3), max_leaves=12)
POD_PATHS = [("metadata", "annotations"), ("metadata", "labels"), ("spec", "containers"), ("spec", "affinity"),
             ("spec", "nodeSelector"), ("spec", "initContainers"), ("spec", "activeDeadlineSeconds"), ("spec",),
             ("metadata",)]


@settings(max_examples=150, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(path=st.sampled_from(POD_PATHS), value=JSON_VALUES,
       annotation=st.sampled_from(sorted(TRAINING)), text=st.text(max_size=12))
def test_any_pod_gets_an_allowed_answer_and_a_patch_that_applies(path: tuple[str, ...], value: Any, annotation: str,
                                                                 text: str) -> None:
    """Whatever shape the pod has (the API server validates pods after mutating webhooks run), the answer
    allows it, and a patch, when there is one, applies to it."""
    pod = gpu_pod({**TRAINING, annotation: text})
    parent: Any = pod
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    body, _ = answer(admission_review(pod, "uid-1"), DECIDE, NOW_S)
    response = body["response"]
    assert response["uid"] == "uid-1" and response["allowed"] is True
    if "patch" in response:
        placed = patched(pod, response)
        assert placed["metadata"]["annotations"]["greengpu.io/capacity-type"] in ("spot", "on-demand")


def test_the_command_serves_the_decision_with_the_inventorys_prices(certificate: tuple[Path, Path]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cluster = Path(__file__).resolve().parents[2] / "examples" / "burst-cloud.cluster.yaml"
    process = subprocess.Popen([sys.executable, "-m", "greengpu.cli", "spot", "webhook", "--listen",
                                f"127.0.0.1:{port}", "--cert", str(certificate[0]), "--key", str(certificate[1]),
                                "--cluster", str(cluster), "--policy", "default"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line == f"greengpu: spot webhook on https://127.0.0.1:{port}/mutate\n", line
        client = Webhook(types.SimpleNamespace(port=port), certificate[0])  # type: ignore[arg-type]
        pod = gpu_pod(TRAINING)
        assert required_terms(patched(pod, client.review(pod))) == [{"matchExpressions": [
            capacity_requirement("spot")]}]
        inference = gpu_pod({"greengpu.io/class": "inference"})
        assert required_terms(patched(inference, client.review(inference))) == [{"matchExpressions": [
            capacity_requirement("on-demand")]}]
    finally:
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = process.wait(timeout=10)
    assert code == 0 and time.monotonic() - started < 5


def test_a_client_that_does_not_trust_the_certificate_is_refused_in_one_log_line(
        webhook: Webhook, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(urllib.error.URLError) as error:
        urllib.request.urlopen(f"https://localhost:{webhook.server.port}/healthz", timeout=10)
    assert isinstance(error.value.reason, ssl.SSLCertVerificationError)
    deadline = time.monotonic() + 5
    while "connection from 127.0.0.1 failed" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "connection from 127.0.0.1 failed" in caplog.text and "UNKNOWN_CA" in caplog.text
    assert "Traceback" not in capfd.readouterr().err
