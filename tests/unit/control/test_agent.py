"""The node agent on the fake NVML, in process: what it sets, journals, detects and restores."""

from __future__ import annotations

from pathlib import Path

import pytest
from manual_clock import ManualClock

from greengpu.backends.fake_nvml import FakeGpu, FakeNvml, make_gpus
from greengpu.backends.nvml import NvmlBackend
from greengpu.capping.cap_decision import decide
from greengpu.control.agent.jobclass import LocalMap, parse_scontrol_jobs
from greengpu.control.agent.journal import Journal
from greengpu.control.agent.node_agent import Agent
from greengpu.energy.curves import INFERENCE
from greengpu.policy import CappingPolicy, ClassCapping
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting

POLICY = CappingPolicy(enabled=True, idle_to_min_limit=True, classes={
    "training": ClassCapping(mode="efficiency", max_slowdown=0.05),
    "inference": ClassCapping(mode="clocks", clock_fraction=0.8, max_slowdown=0.05),
    "batch": ClassCapping(mode="fixed", limit_w=20.0),
})




def make_agent(tmp_path: Path, gpus: list[FakeGpu], classes: dict[int, str], dry_run: bool = False,
               root: bool = True, fake: FakeNvml | None = None) -> tuple[Agent, FakeNvml, ManualClock]:
    clock = ManualClock(0.0)
    fake = fake or FakeNvml(gpus, root=root, clock=clock)
    agent = Agent(NvmlBackend(lib=fake, clock=clock), POLICY, LocalMap(classes), Journal(tmp_path / "journal.jsonl"),
                  dry_run=dry_run, nonbinding_after_s=30.0, clock=clock)
    return agent, fake, clock


def events(tmp_path: Path) -> list[str]:
    return [e["event"] for e in Journal(tmp_path / "journal.jsonl").entries()]


def test_each_class_gets_the_pure_decision_and_stop_restores(tmp_path: Path) -> None:
    agent, fake, _ = make_agent(tmp_path, make_gpus("4xA100"), {0: "training", 1: "inference", 2: "batch"})
    for index in range(3):
        fake.set_load(index, 0.9, [100 + index])
    agent.start()
    agent.tick()
    constraints = agent.backend.constraints(0)
    expected = decide("training", POLICY, constraints, 1410)
    # the model's least energy within 5%: 367 W, 0.9175 of the 400 W uncapped draw (the Zeus curve read
    # against the draw since issue 41, docs/POWER-MODEL.md; 259 W before, modelled at 319.6 W, above its cap)
    assert fake.gpus[0].limit_w == expected.limit_w == 367.0
    # inference: the lowest clock its curve keeps within 5% (memory-bound decoding slows by its share only)
    assert fake.gpus[1].locked_clock_mhz == round(1410 * INFERENCE.clock_fraction_within(0.05, 0.8))
    assert fake.gpus[1].locked_clock_mhz < round(1410 / 1.05) and fake.gpus[1].limit_w == 400.0
    assert fake.gpus[2].limit_w == 100.0  # fixed 20 W clamped to the A100's minimum
    assert fake.gpus[3].limit_w == 100.0  # idle: minimum limit
    agent.tick()  # nothing differs: nothing written again
    assert len(fake.calls) == 4
    agent.stop()
    assert [g.limit_w for g in fake.gpus] == [400.0] * 4
    assert all(g.locked_clock_mhz is None for g in fake.gpus)
    assert events(tmp_path)[0] == "start" and events(tmp_path)[-1] == "stop"


def test_a_new_job_on_a_gpu_gets_its_own_setting(tmp_path: Path) -> None:
    agent, fake, _ = make_agent(tmp_path, make_gpus("1xA100"), {0: "training"})
    agent.start()
    agent.tick()
    assert fake.gpus[0].limit_w == 100.0  # idle
    fake.set_load(0, 0.9, [7])
    agent.tick()
    assert fake.gpus[0].limit_w == 367.0
    fake.set_load(0, 0.0, [])
    agent.tick()
    assert fake.gpus[0].limit_w == 100.0


def test_drift_is_set_again_and_journalled(tmp_path: Path) -> None:
    agent, fake, _ = make_agent(tmp_path, make_gpus("1xA100"), {0: "training"})
    fake.set_load(0, 0.9, [7])
    agent.start()
    agent.tick()
    fake.gpus[0].limit_w = 400.0  # an admin (or a driver reload) put it back
    report = agent.tick()
    assert fake.gpus[0].limit_w == 367.0
    assert any("drift" in line for line in report.changes)
    reasons = [e.get("reason", "") for e in Journal(tmp_path / "journal.jsonl").entries()]
    assert any(r.startswith("drift: the limit was changed outside greengpu") for r in reasons)


def test_a_cap_that_never_binds_moves_to_locked_clocks(tmp_path: Path) -> None:
    # LLM decode on an H200 draws well under any limit the efficiency pick chooses.
    decode_h200 = FakeGpu(name="NVIDIA H200", min_limit_w=200, max_limit_w=700, default_limit_w=700, idle_w=75,
                          draw_w=300, max_sm_clock_mhz=1980)
    agent, fake, clock = make_agent(tmp_path, [decode_h200], {0: "training"})
    fake.set_load(0, 0.95, [7])
    agent.start()
    agent.tick()
    capped_w = fake.gpus[0].limit_w
    assert capped_w < 700.0 and fake.gpus[0].locked_clock_mhz is None
    for _ in range(4):
        clock.now_s += 10.0
        agent.tick()
    assert fake.gpus[0].locked_clock_mhz == round(1980 / 1.05)
    assert fake.gpus[0].limit_w == 700.0  # the limit that did nothing is lifted


def test_a_cap_that_binds_stays(tmp_path: Path) -> None:
    agent, fake, clock = make_agent(tmp_path, make_gpus("1xA100"), {0: "training"})
    fake.set_load(0, 1.0, [7])
    agent.start()
    for _ in range(6):
        agent.tick()
        clock.now_s += 10.0
    assert fake.gpus[0].limit_w == 367.0 and fake.gpus[0].locked_clock_mhz is None


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    agent, fake, _ = make_agent(tmp_path, make_gpus("2xA100"), {0: "training"}, dry_run=True)
    fake.set_load(0, 0.9, [7])
    agent.start()
    report = agent.tick()
    agent.stop()
    assert fake.calls == []
    assert any("would set 367 W" in line for line in report.changes)


def test_not_root_keeps_reading_and_journals_no_write(tmp_path: Path) -> None:
    agent, fake, _ = make_agent(tmp_path, make_gpus("2xA100"), {0: "training"}, root=False)
    fake.set_load(0, 0.9, [7])
    agent.start()
    agent.tick()
    agent.tick()
    assert agent.backend.read_only and fake.calls == []
    assert [g.limit_w for g in fake.gpus] == [400.0, 400.0]
    assert len(agent.last_readings) == 2
    # The first attempted write is journalled before it is tried; nothing after the backend turned read-only.
    assert events(tmp_path).count("set_limit") == 1


def test_restart_after_a_crash_restores_first(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    fake = FakeNvml(make_gpus("2xA100"), clock=clock)
    fake.set_load(0, 0.9, [7])
    fake.set_load(1, 0.9, [8])
    crashed, _, _ = make_agent(tmp_path, [], {0: "training", 1: "inference"}, fake=fake)
    crashed.start()
    crashed.tick()
    assert fake.gpus[0].limit_w == 367.0 and fake.gpus[1].locked_clock_mhz is not None
    # No stop(): the process died. A new agent, with no jobs mapped, starts on the same GPUs.
    fake.set_load(0, 0.0, [])
    fake.set_load(1, 0.0, [])
    fresh = Agent(NvmlBackend(lib=fake, clock=clock), CappingPolicy(enabled=False), LocalMap({}),
                  Journal(tmp_path / "journal.jsonl"), clock=clock)
    lines = fresh.start()
    assert fake.gpus[0].limit_w == 400.0 and fake.gpus[1].locked_clock_mhz is None
    assert len(lines) == 2 and all("unclean exit" in line for line in lines)
    fresh.stop()
    assert Journal(tmp_path / "journal.jsonl").left_changed() == []


def test_journal_ignores_a_torn_last_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append("start", gpus=1)
    journal.append("set_limit", gpu=0, uuid="GPU-a", limit_w=250.0, previous_w=300.0)
    with journal.path.open("a") as out:
        out.write('{"event": "set_li')
    [touched] = journal.left_changed()
    assert (touched.index, touched.uuid, touched.original_limit_w) == (0, "GPU-a", 300.0)


SCONTROL = """\
JobId=101 JobName=train UserId=ann(1000) Partition=gpu Comment=greengpu.class=inference JobState=RUNNING \
NodeList=gpu[01-02] JOB_GRES=gpu:4 Nodes=gpu01 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:0-1) \
Nodes=gpu02 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:2,3)
JobId=102 JobName=batch Partition=gpu-batch JobState=RUNNING NodeList=gpu01 Nodes=gpu01 CPU_IDs=8 Mem=0 \
GRES=gpu:1(IDX:3)
JobId=103 JobName=waiting Partition=gpu JobState=PENDING NodeList=(null)
"""
PENDING_GPU = ("JobId=104 JobName=wrap UserId=root(0) Priority=4294901757 Partition=gpu JobState=PENDING "
               "Reason=Resources Dependency=(null) NodeList=(null) ReqTRES=cpu=1,mem=1M,node=1,billing=1,gres/gpu=4 "
               "AllocTRES=(null) TresPerNode=gres:gpu:4\n")
PENDING_BEHIND = PENDING_GPU.replace("104", "105").replace("Reason=Resources", "Reason=Priority")
PENDING_CPU = ("JobId=106 JobName=cpu Partition=cpu JobState=PENDING Reason=Resources NodeList=(null) "
               "ReqTRES=cpu=64,mem=1M,node=1,billing=64 AllocTRES=(null)\n")
PENDING_HELD = PENDING_GPU.replace("104", "107").replace("Reason=Resources", "Reason=JobHeldUser")


def test_slurm_jobs_map_to_gpu_indices_and_classes() -> None:
    on_gpu01 = parse_scontrol_jobs(SCONTROL, "gpu01", {"gpu-batch": "batch"}, "training")
    assert {i: (j.job_id, j.job_class) for i, j in on_gpu01.items()} == {
        0: ("101", "inference"), 1: ("101", "inference"), 3: ("102", "batch")}
    on_gpu02 = parse_scontrol_jobs(SCONTROL, "gpu02", {}, "training")
    assert sorted(on_gpu02) == [2, 3]


def test_capacity_is_short_only_while_a_gpu_job_waits_for_resources() -> None:
    from greengpu.control.agent.jobclass import SlurmJobs, gpu_jobs_waiting_for_resources

    waiting = gpu_jobs_waiting_for_resources(SCONTROL + PENDING_GPU + PENDING_BEHIND)
    assert waiting.job_ids == ("104",)
    # Behind another job, waiting on a limit or held, or asking for CPUs only: no GPU shortage.
    assert not gpu_jobs_waiting_for_resources(SCONTROL + PENDING_BEHIND + PENDING_CPU + PENDING_HELD).waiting
    listing = [SCONTROL + PENDING_GPU]
    source = SlurmJobs("gpu01", run=lambda argv: listing[0])
    assert not source.work_waiting().waiting  # nothing read yet
    assert sorted(source.jobs([])) == [0, 1, 3] and source.work_waiting().waiting
    listing[0] = SCONTROL
    source.jobs([])
    assert not source.work_waiting().waiting


def test_running_jobs_go_uncapped_while_gpu_work_waits_and_capped_again_after(tmp_path: Path) -> None:
    """relax_when_queued on the node: the same decision as the simulator's, read from the class source."""
    from dataclasses import replace

    class QueueAware(LocalMap):
        short = False

        def work_waiting(self) -> WorkWaiting:
            return WorkWaiting(("queued-job",)) if self.short else NOTHING_WAITS

    clock = ManualClock(0.0)
    fake = FakeNvml(make_gpus("2xA100"), clock=clock)
    source = QueueAware({0: "training"})
    agent = Agent(NvmlBackend(lib=fake, clock=clock), replace(POLICY, relax_when_queued=True), source,
                  Journal(tmp_path / "journal.jsonl"), clock=clock)
    agent.start()
    fake.set_load(0, 0.9, [100])
    agent.tick()
    capped_w = fake.gpus[0].limit_w
    assert capped_w == 367.0
    source.short = True
    clock.now_s += 60
    report = agent.tick()
    assert fake.gpus[0].limit_w == 400.0  # the default limit: a slower job would lengthen the queue
    assert agent.relaxed_for_queue  # (exported as greengpu_agent_caps_relaxed_for_queue)
    assert any("400 W" in line and "wait for capacity" in line for line in report.changes)
    source.short = False
    clock.now_s += 60
    agent.tick()
    assert fake.gpus[0].limit_w == capped_w
    reasons = [e.get("reason", "") for e in Journal(tmp_path / "journal.jsonl").entries() if e["event"] == "set_limit"]
    assert any("wait for capacity" in r for r in reasons)  # every change is journalled, with its reason
    # Without the policy switch, a queue changes nothing.
    steady = Agent(NvmlBackend(lib=fake, clock=clock), POLICY, source, Journal(tmp_path / "other.jsonl"), clock=clock)
    agent.stop()
    steady.start()
    source.short = True
    steady.tick()
    assert fake.gpus[0].limit_w == capped_w
    steady.stop()


def test_bad_class_file_names_file_line_and_key(tmp_path: Path) -> None:
    from greengpu.control.agent.jobclass import load_class_file
    from greengpu.errors import ConfigError

    path = tmp_path / "classes.yaml"
    path.write_text("default_class: training\ngpus:\n  0: inference\n  1: gaming\n")
    with pytest.raises(ConfigError) as error:
        load_class_file(path)
    assert str(error.value).startswith(f"{path}:4: gpus.1: must be one of training, inference")


def test_kubernetes_pod_annotation_gives_the_class(tmp_path: Path) -> None:
    from fake_kube import FakeKube, pod

    from greengpu.backends.kubernetes import KubeApi, make_api_client
    from greengpu.control.agent.jobclass import KubernetesPods

    # /proc/PID/cgroup as the kubelet leaves it: systemd driver (cgroup v2) and cgroupfs driver (v1).
    inference_uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    training_uid = "11112222-3333-4444-5555-666677778888"
    (tmp_path / "501").mkdir()
    (tmp_path / "501" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{inference_uid.replace('-', '_')}.slice/cri-containerd-abc.scope\n")
    (tmp_path / "502").mkdir()
    (tmp_path / "502" / "cgroup").write_text(f"12:memory:/kubepods/besteffort/pod{training_uid}/4f5e\n")
    (tmp_path / "503").mkdir()
    (tmp_path / "503" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    clock = ManualClock(0.0)
    fake = FakeNvml(make_gpus("4xA100"), clock=clock)
    for index, pid in enumerate((501, 502, 503)):
        fake.set_load(index, 0.9, [pid])
    with FakeKube() as kube:
        kube.pods = [
            pod("llm-serve-0", inference_uid, "gpu07", namespace="serving",
                annotations={"greengpu.io/class": "inference"}),
            pod("trainer-0", training_uid, "gpu07", namespace="research"),
            pod("elsewhere", "99999999-3333-4444-5555-666677778888", "gpu08",
                annotations={"greengpu.io/class": "inference"}),
        ]
        api = KubeApi(make_api_client(host=kube.url))
        source = KubernetesPods("gpu07", api.pods_on_node, default_class="batch", proc_root=tmp_path,
                                list_pending=api.pending_gpu_pods)
        backend = NvmlBackend(lib=fake, clock=clock)
        backend.open()
        jobs = source.jobs([backend.read(i) for i in range(4)])
        assert ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu07") in kube.requests
        assert not source.work_waiting().waiting
        # A pod that asks for GPUs and is not scheduled anywhere: capacity is short.
        kube.pods.append(pod("sweep-17", "22223333-4444-5555-6666-777788889999", "", phase="Pending", gpus=2))
        source.jobs([backend.read(i) for i in range(4)])
        assert source.work_waiting().waiting
        # Served from the API server's watch cache: every node's agent asks each tick.
        assert ("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending&resourceVersion=0") in kube.requests
    assert {i: (j.job_id, j.job_class) for i, j in jobs.items()} == {
        0: ("serving/llm-serve-0", "inference"),
        1: ("research/trainer-0", "batch"),  # no annotation: the default class
        2: ("pid:503", "batch"),  # a process outside Kubernetes still makes the GPU busy
    }


def test_slurm_accounts_are_the_gpus_tenants() -> None:
    listing = SCONTROL.replace("JobId=101 JobName=train UserId=ann(1000)", "JobId=101 JobName=train UserId=ann(1000) "
                               "Account=physics").replace("JobId=102 JobName=batch", "JobId=102 JobName=batch "
                                                          "Account=(null)")
    on_gpu01 = parse_scontrol_jobs(listing, "gpu01", {}, "training")
    assert {i: j.tenant for i, j in on_gpu01.items()} == {0: "physics", 1: "physics", 3: ""}
