"""The Kubernetes manifests in deploy/kubernetes, checked offline: every core object against the
Kubernetes JSON schemas (kubernetes-validate, strict: an unknown field fails), RBAC grants exactly
what the daemon and the agent need, the workloads keep their promises (leader election, probes,
non-root, read-only root, no capability but the agent's SYS_ADMIN), the ServiceMonitors select a
Service and port that exist, and the PrometheusRule's groups load in the real `promtool` and fire
when they should (`promtool test rules` on synthetic series)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_tools import (
    DEPLOY,
    greengpu_command,
    known_metrics,
    metric_names,
    option_names,
    require_module,
    require_tool,
)

KUBERNETES = DEPLOY / "kubernetes"
NAMESPACE = "greengpu"
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
"""The Prometheus Operator's kinds: no schema in kubernetes-validate, checked structurally below."""
KUBERNETES_VERSIONS = ("1.30.0", "latest")
"""The oldest Kubernetes release the manifests promise to fit, and the newest the schemas know."""

Doc = dict[str, Any]


def _manifests() -> list[tuple[str, Doc]]:
    docs = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


MANIFESTS = _manifests()


def _one(kind: str, name: str) -> Doc:
    found = [doc for _, doc in MANIFESTS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _container(workload: Doc) -> Doc:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _validate(doc: Doc, version: str) -> None:
    validator = require_module("kubernetes_validate", "pip install -e '.[test]'")
    wanted = validator.latest_version() if version == "latest" else version
    validator.validate(doc, wanted, strict=True)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_core_object_fits_the_kubernetes_schema(version: str) -> None:
    kinds = {doc["kind"] for _, doc in MANIFESTS}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
            "DaemonSet", "Service", "PodDisruptionBudget"} | CUSTOM_KINDS == kinds
    for file_name, doc in MANIFESTS:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        _validate(doc, version)  # raises with the path of the offending field
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"].get("namespace") == NAMESPACE, (file_name, doc["kind"])


def test_the_schema_check_is_strict() -> None:
    """A misspelt field (a probe that Kubernetes would silently drop) is an error, not a pass."""
    validator = require_module("kubernetes_validate", "pip install -e '.[test]'")
    deployment = copy.deepcopy(_one("Deployment", "greengpu-daemon"))
    _container(deployment)["livenesProbe"] = _container(deployment).pop("livenessProbe")
    with pytest.raises(validator.ValidationError):
        _validate(deployment, "latest")


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = sorted(p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    images = {image["name"] for image in kustomization["images"]}
    for kind in ("Deployment", "DaemonSet"):
        for _, doc in MANIFESTS:
            if doc["kind"] == kind:
                assert _container(doc)["image"].split(":")[0] in images


# --- RBAC ------------------------------------------------------------------------------------------

Grant = tuple[str, str, str, str, str]
"""(scope: "cluster" or a namespace, apiGroup, resource, verb, resourceName or "")"""

DAEMON_GRANTS: set[Grant] = {
    *(("cluster", "", "nodes", verb, "") for verb in ("get", "list", "watch", "patch")),
    *(("cluster", "", "pods", verb, "") for verb in ("get", "list", "watch")),
    ("cluster", "", "pods/eviction", "create", ""),
    (NAMESPACE, "coordination.k8s.io", "leases", "create", ""),
    (NAMESPACE, "coordination.k8s.io", "leases", "get", "greengpu-daemon"),
    (NAMESPACE, "coordination.k8s.io", "leases", "update", "greengpu-daemon"),
}
AGENT_GRANTS: set[Grant] = {("cluster", "", "pods", "list", "")}


def _grants(service_account: str) -> set[Grant]:
    """Everything the bindings give the service account, rule by rule, expanded to single grants."""
    roles = {(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]): doc
             for _, doc in MANIFESTS if doc["kind"] in ("ClusterRole", "Role")}
    grants: set[Grant] = set()
    for _, binding in MANIFESTS:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE} not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace")
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])]
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else namespace
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames", [""]):
                            grants.add((scope, group, resource, verb, name))
    return grants


@pytest.mark.parametrize(("service_account", "expected"), [("greengpu-daemon", DAEMON_GRANTS),
                                                           ("greengpu-agent", AGENT_GRANTS)])
def test_rbac_grants_exactly_what_each_component_needs(service_account: str, expected: set[Grant]) -> None:
    granted = _grants(service_account)
    assert granted == expected, (sorted(granted - expected), sorted(expected - granted))
    for grant in granted:
        assert "*" not in grant and not grant[2].startswith("secrets")
        assert grant[3] not in ("escalate", "bind", "impersonate", "delete", "deletecollection")


def test_no_role_anywhere_reaches_secrets_or_uses_a_wildcard() -> None:
    for _, doc in MANIFESTS:
        if doc["kind"] in ("ClusterRole", "Role"):
            assert "aggregationRule" not in doc
            for rule in doc["rules"]:
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(field, []), (doc["metadata"]["name"], rule)
                assert not any(r.startswith("secrets") for r in rule["resources"]), doc["metadata"]["name"]


# --- the workloads ---------------------------------------------------------------------------------

def _args(container: Doc) -> dict[str, str]:
    """`--key=value` arguments as a dict (every option in these manifests is written that way)."""
    options = {}
    for arg in container["args"][1:]:
        assert arg.startswith("--") and "=" in arg, arg
        key, value = arg.split("=", 1)
        options[key] = value
    return options


def _env_from_field(container: Doc, name: str) -> str:
    entry = next(e for e in container["env"] if e["name"] == name)
    return str(entry["valueFrom"]["fieldRef"]["fieldPath"])


def test_the_daemon_runs_two_replicas_with_leader_election_and_no_privilege() -> None:
    deployment = _one("Deployment", "greengpu-daemon")
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert container["args"][0] == "daemon"
    args = _args(container)
    assert args["--source"] == "kubernetes" and args["--backend"] == "real"
    assert args["--lease-namespace"] == "$(POD_NAMESPACE)" and _env_from_field(container, "POD_NAMESPACE") == \
        "metadata.namespace"
    assert args["--lease-name"] == "greengpu-daemon"  # the one Lease the Role lets it read and renew
    port = next(p for p in container["ports"] if p["name"] == "http")
    assert args["--listen"] == f"0.0.0.0:{port['containerPort']}"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert "readinessProbe" in container
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert pod["serviceAccountName"] == "greengpu-daemon"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    # Writable paths are volumes: the state directory and /tmp.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert args["--state"] in mounts and not mounts[args["--state"]].get("readOnly")
    assert args["--token-file"].rsplit("/", 1)[0] in mounts
    # Never on a node it may put to sleep.
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]} in terms[0]["matchExpressions"]
    budget = _one("PodDisruptionBudget", "greengpu-daemon")
    assert budget["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"].items()


def test_the_agent_reaches_nvml_the_host_network_and_the_kubelet_and_nothing_more() -> None:
    daemon_set = _one("DaemonSet", "greengpu-agent")
    pod = daemon_set["spec"]["template"]["spec"]
    container = _container(daemon_set)
    assert container["args"][0] == "agent"
    args = _args(container)
    assert args["--class-source"] == "kubernetes"
    assert args["--node"] == "$(NODE_NAME)" and _env_from_field(container, "NODE_NAME") == "spec.nodeName"
    assert args["--listen"].startswith("$(NODE_IP):") and _env_from_field(container, "NODE_IP") == "status.hostIP"
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet" and not pod.get("hostPID")
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    # It sees every GPU without taking one from the pods that need them.
    assert "nvidia.com/gpu" not in container["resources"].get("requests", {})
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and pod["securityContext"]["seccompProfile"]["type"] == \
        "RuntimeDefault"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    pod_resources = mounts["/var/lib/kubelet/pod-resources"]
    assert pod_resources["readOnly"] is True
    assert volumes[pod_resources["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    journal_dir = args["--journal"].rsplit("/", 1)[0]
    assert "hostPath" in volumes[mounts[journal_dir]["name"]]  # outlives the pod: a new agent restores GPUs
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize(("kind", "name"), [("Deployment", "greengpu-daemon"), ("DaemonSet", "greengpu-agent")])
def test_the_arguments_are_options_the_command_has(kind: str, name: str) -> None:
    """Each `--option` in a manifest exists on `greengpu daemon` / `greengpu agent`."""
    container = _container(_one(kind, name))
    options = option_names(greengpu_command(container["args"][0]))
    assert set(_args(container)) <= options, (name, set(_args(container)) - options)


def test_services_select_their_pods_and_name_container_ports() -> None:
    for workload_kind, name in (("Deployment", "greengpu-daemon"), ("DaemonSet", "greengpu-agent")):
        workload = _one(workload_kind, name)
        service = _one("Service", name)
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        container_ports = {p["name"]: p["containerPort"] for p in _container(workload)["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports and port["port"] == container_ports[port["targetPort"]]


# --- monitoring ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["greengpu-daemon", "greengpu-agent"])
def test_the_service_monitor_selects_a_service_and_a_port_that_exist(name: str) -> None:
    monitor = _one("ServiceMonitor", name)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels"}
    namespaces = spec["namespaceSelector"]["matchNames"]
    wanted = spec["selector"]["matchLabels"]
    assert wanted and not spec["selector"].get("matchExpressions")
    services = [doc for _, doc in MANIFESTS if doc["kind"] == "Service"
                and doc["metadata"]["namespace"] in namespaces and wanted.items() <= doc["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in services] == [name]
    port_names = {p["name"] for p in services[0]["spec"]["ports"]}
    assert spec["endpoints"]
    for endpoint in spec["endpoints"]:
        assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
        assert _seconds(endpoint["scrapeTimeout"]) < _seconds(endpoint["interval"])


def _seconds(duration: str) -> int:
    return int(duration[:-1]) * {"s": 1, "m": 60}[duration[-1]]


def _rule_groups() -> Doc:
    rule = _one("PrometheusRule", "greengpu")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and set(rule["spec"]) == {"groups"}
    return {"groups": rule["spec"]["groups"]}


def test_the_alert_rules_load_in_promtool_and_name_only_real_metrics(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    groups = _rule_groups()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(groups))
    result = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = [rule for group in groups["groups"] for rule in group["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in result.stdout
    known = known_metrics()
    for rule in alerts:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        named = metric_names(rule["expr"])
        assert named and named <= known, (rule["alert"], named - known)


PROMTOOL_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # The leader ticks every minute for 10 minutes, then its loop hangs (the stamp stops at 600 s).
      - series: 'greengpu_daemon_last_good_tick_timestamp_seconds{pod="daemon-a"}'
        values: '60+60x9 600x50'
      # The standby never ticked: its 0 must not make the cluster look stale while the leader ticks.
      - series: 'greengpu_daemon_last_good_tick_timestamp_seconds{pod="daemon-b"}'
        values: '0x59'
      - series: 'greengpu_daemon_ticks_total{pod="daemon-a",outcome="ok"}'
        values: '1+1x9 10x50'
      - series: 'greengpu_daemon_ticks_total{pod="daemon-a",outcome="failed"}'
        values: '0x9 1+1x50'
      - series: 'up{job="greengpu-daemon",pod="daemon-a"}'
        values: '1x59'
      - series: 'greengpu_daemon_alerts_total{pod="daemon-a",kind="wake_failed"}'
        values: '0x19 1x40'
      - series: 'greengpu_daemon_paused{pod="daemon-a"}'
        values: '0x59'
      - series: 'greengpu_agent_last_tick_timestamp_seconds{node="gpu1"}'
        values: '60+60x59'
      - series: 'greengpu_agent_read_only{node="gpu1"}'
        values: '1x59'
    alert_rule_test:
      - eval_time: 9m
        alertname: GreengpuDaemonTickStale
        exp_alerts: []
      - eval_time: 25m
        alertname: GreengpuDaemonTickStale
        exp_alerts: []
      - eval_time: 30m
        alertname: GreengpuDaemonTickStale
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: The greengpu daemon has had no good control tick for 20m 0s
              description: >-
                The control loop is stuck or every tick fails: no node is put to sleep or woken by
                greengpu. Its /healthz fails too, so Kubernetes restarts the replica; see its log.
      - eval_time: 9m
        alertname: GreengpuDaemonDown
        exp_alerts: []
      - eval_time: 25m
        alertname: GreengpuDaemonTicksFailing
        exp_alerts: []
      - eval_time: 40m
        alertname: GreengpuDaemonTicksFailing
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: More than half of the greengpu daemon's ticks failed in the last 15 minutes
              description: >-
                The daemon cannot observe the cluster or carry out its actions reliably (API errors,
                timeouts). It backs off and keeps GPUs at default limits while it cannot tell what runs.
      - eval_time: 19m
        alertname: GreengpuWakeFailed
        exp_alerts: []
      - eval_time: 45m
        alertname: GreengpuAgentReadOnly
        exp_alerts:
          - exp_labels: {severity: warning, node: gpu1}
            exp_annotations:
              summary: NVML refuses the greengpu agent's writes on gpu1
              description: >-
                Without CAP_SYS_ADMIN (or root) the agent only reads: metrics are served, nothing is
                capped. Check the DaemonSet's securityContext and the NVIDIA container runtime.
      - eval_time: 45m
        alertname: GreengpuAgentTickStale
        exp_alerts: []
      - eval_time: 45m
        alertname: GreengpuDaemonPausedTooLong
        exp_alerts: []
  - interval: 1m
    input_series:
      - series: 'greengpu_daemon_paused{pod="daemon-a"}'
        values: '1x300'
      - series: 'greengpu_daemon_alerts_total{pod="daemon-a",kind="wake_failed"}'
        values: '0x9 1x20'
      - series: 'greengpu_daemon_alerts_total{pod="daemon-a",kind="observe_failed"}'
        values: '0+1x30'
      - series: 'greengpu_daemon_nodes{pod="daemon-a",state="failed"}'
        values: '0x4 1x40'
    alert_rule_test:
      - eval_time: 12m
        alertname: GreengpuNodesFailed
        exp_alerts: []
      - eval_time: 20m
        alertname: GreengpuNodesFailed
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: 1 node(s) failed in the workload manager for 10 minutes
              description: >-
                Slurm set them DOWN or FAIL (down~: ResumeTimeout reached). greengpu neither sleeps them nor
                counts them as capacity; its node_failed alert names each node with Slurm's reason.
      - eval_time: 3h
        alertname: GreengpuDaemonPausedTooLong
        exp_alerts: []
      - eval_time: 4h5m
        alertname: GreengpuDaemonPausedTooLong
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: The greengpu daemon has been paused for more than 4 hours
              description: >-
                While paused it neither sleeps nor caps anything: the cluster runs without savings.
                `POST /v1/resume` (with the bearer token) resumes it.
      - eval_time: 12m
        alertname: GreengpuWakeFailed
        exp_alerts:
          - exp_labels: {severity: critical, kind: wake_failed}
            exp_annotations:
              summary: greengpu raised 1 wake alert(s) of kind wake_failed in 30 minutes
              description: >-
                A node did not come back after its wake-ups (lost magic packets, a node that never
                boots). Work planned on it runs elsewhere; the node needs a look (BMC, NIC Wake-on-LAN).
      - eval_time: 12m
        alertname: GreengpuDaemonDown
        exp_alerts:
          - exp_labels: {severity: critical}
            exp_annotations:
              summary: No greengpu daemon replica answers scrapes
              description: >-
                Nothing decides node sleep and wake-ups for pending GPU work while no replica runs.
                Nodes asleep now stay asleep until a replica is back (the scheduler's own resume path
                still works on Slurm). Check `kubectl -n greengpu get pods -l app.kubernetes.io/name=greengpu-daemon`.
"""


def test_the_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    """promtool evaluates the rules on synthetic series: a hung leader, a paused daemon, a failed wake."""
    promtool = require_tool("promtool", "apt-get install prometheus")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_groups()))
    (tmp_path / "tests.yaml").write_text(PROMTOOL_TESTS)
    result = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_daemons_grace_period_outlasts_its_longest_uncut_action() -> None:
    """SIGKILL must not land mid-suspend: the grace period covers a suspend command's timeout and the stop grace."""
    from greengpu.control.daemon.daemon_main import STOP_WAIT_S
    from greengpu.control.hooks.sleep_control import SUSPEND_TIMEOUT_S

    documents = list(yaml.safe_load_all((KUBERNETES / "daemon.yaml").read_text()))
    deployment = next(d for d in documents if d and d.get("kind") == "Deployment")
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s >= SUSPEND_TIMEOUT_S + STOP_WAIT_S


def test_the_daemon_suspends_through_each_nodes_agent_with_a_shared_token() -> None:
    """The shipped Deployment cannot ssh (no key, UID 65532): it sets no --suspend-command and asks the agents,
    which mount the host's system bus for logind's Suspend; both read the token from the same Secret."""
    daemon = _container(_one("Deployment", "greengpu-daemon"))
    agent_set = _one("DaemonSet", "greengpu-agent")
    agent = _container(agent_set)
    daemon_args = _args(daemon)
    assert "--suspend-command" not in daemon_args
    volumes = {v["name"]: v for v in agent_set["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    assert volumes[mounts["/run/dbus/system_bus_socket"]]["hostPath"] == {"path": "/run/dbus/system_bus_socket",
                                                                          "type": "Socket"}
    secrets = set()
    for workload, container, flag in ((_one("Deployment", "greengpu-daemon"), daemon, "--agent-token-file"),
                                      (agent_set, agent, "--suspend-token-file")):
        path = _args(container)[flag]
        name = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}[path.rsplit("/", 1)[0]]
        volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == name)
        secrets.add(volume["secret"]["secretName"])
    assert secrets == {"greengpu-agent-token"}
    assert agent["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]  # nothing more for the suspend
    assert not agent_set["spec"]["template"]["spec"].get("hostPID")
