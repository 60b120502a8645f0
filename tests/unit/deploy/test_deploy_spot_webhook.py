"""deploy/kubernetes/spot-webhook, checked offline as the manifests beside it are: every core object against
the Kubernetes JSON schemas (kubernetes-validate, strict), the webhook configuration never able to block a
pod (failurePolicy Ignore, pod creations only, not greengpu's own namespace), its service reference pointing
at the Service and port that exist, the container's arguments options `greengpu spot webhook` has, the TLS
files where the Secret is mounted, and cert-manager's Certificate feeding that Secret and the CA injection."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from deploy_tools import DEPLOY, greengpu_command, option_names, require_module

WEBHOOK = DEPLOY / "kubernetes" / "spot-webhook"
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
"""cert-manager's kinds: no schema in kubernetes-validate, checked structurally below."""

Doc = dict[str, Any]


def _manifests() -> list[Doc]:
    return [doc for path in sorted(WEBHOOK.glob("*.yaml")) if path.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(path.read_text()) if doc]


MANIFESTS = _manifests()


def _one(kind: str) -> Doc:
    found = [doc for doc in MANIFESTS if doc["kind"] == kind]
    assert len(found) == 1, (kind, len(found))
    return found[0]


@pytest.mark.parametrize("version", ("1.30.0", "latest"))
def test_every_core_object_fits_the_kubernetes_schema(version: str) -> None:
    validator = require_module("kubernetes_validate", "pip install -e '.[test]'")
    wanted = validator.latest_version() if version == "latest" else version
    assert {doc["kind"] for doc in MANIFESTS} == {"Deployment", "Service", "PodDisruptionBudget",
                                                  "MutatingWebhookConfiguration"} | CERT_MANAGER_KINDS
    for doc in MANIFESTS:
        if doc["kind"] not in CERT_MANAGER_KINDS:
            validator.validate(doc, wanted, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((WEBHOOK / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in WEBHOOK.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")


def test_the_webhook_can_never_block_a_pod_or_its_own_namespace() -> None:
    (webhook,) = _one("MutatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Ignore" and webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"] and webhook["timeoutSeconds"] <= 10
    assert webhook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                 "resources": ["pods"], "scope": "Namespaced"}]
    (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["key"] == "kubernetes.io/metadata.name" and excluded["operator"] == "NotIn"
    assert {"kube-system", "greengpu"} <= set(excluded["values"])


def test_the_webhook_reaches_the_service_port_and_path_the_server_answers() -> None:
    (webhook,) = _one("MutatingWebhookConfiguration")["webhooks"]
    reference = webhook["clientConfig"]["service"]
    service, deployment = _one("Service"), _one("Deployment")
    assert (reference["name"], reference["namespace"]) == (service["metadata"]["name"],
                                                           service["metadata"]["namespace"])
    assert reference["path"] == "/mutate"
    (port,) = service["spec"]["ports"]
    assert reference["port"] == port["port"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (container_port,) = container["ports"]
    assert port["targetPort"] == container_port["name"]
    args = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"][2:])
    assert container["command"] == ["greengpu"] and container["args"][:2] == ["spot", "webhook"]
    assert args["listen"].endswith(f":{container_port['containerPort']}")
    assert {f"--{name}" for name in args} <= option_names(greengpu_command("spot").commands["webhook"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert args["cert"] == f"{mounts['tls']}/tls.crt" and args["key"] == f"{mounts['tls']}/tls.key"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    certificate = _one("Certificate")
    assert volumes["tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc" in certificate["spec"]["dnsNames"]
    injected = _one("MutatingWebhookConfiguration")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert injected == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert certificate["spec"]["issuerRef"]["name"] == _one("Issuer")["metadata"]["name"]


def test_the_webhook_pods_run_unprivileged_without_an_api_token() -> None:
    spec = _one("Deployment")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"]["drop"] == ["ALL"]
