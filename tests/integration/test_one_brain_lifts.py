"""One brain for "which caps lift": the replay, the daemon and the node agents lift the caps of the same jobs.

A lever may spend slack, never queue time (greengpu.sched.slack): the caps lift on exactly the running jobs
whose completion frees a waiting job's way. The simulator lifts them job by job (`Jobs.set_lifted`); the
daemon's tick names them (`WorkWaiting.uncapped`), caps its own GPUs by that and serves the names on
`GET /v1/waiting`, from which each agent lifts exactly those jobs' GPUs. The two cases of issue 36, where
the bodies used to differ (the live bodies lifted all caps or none):

- a quota wait: tenant b is at its quota, so b's running job is in its way and a's is not (one lift in the
  replay; none live before, the quota wait not being a capacity wait);
- a reservation wait: a 4-GPU job holds a reservation on the node that frees first, so only that node's
  job is in its way (one lift in the replay; both live before).

The replay is the simulator's own engine and job runner; the live side the real daemon on the fake
cluster (fake NVML behind the real adapter) and real agents over HTTP on loopback, each on a fake NVML.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from inventories import SITE
from manual_clock import ManualClock

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.nvml import GpuReading, NvmlBackend
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.agent.jobclass import DaemonWaiting, GpuJob
from greengpu.control.agent.journal import Journal
from greengpu.control.agent.node_agent import Agent
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.http_api import DaemonServer
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Cluster, Job
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting

T0 = 1_700_000_000.0
A100 = ("gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
        "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410")
DEFAULT_W = 400.0
UNTIL_S = 300.0


def inventory(tmp_path: Path, gpus: int, nodes: str, tenants: str) -> Cluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100: {{gpus: {gpus}, {A100}}}\nnodes:\n  - {{name: \"{nodes}\", "
                    f"type: a100}}\ntenants:\n{tenants}")
    return load_cluster(path)


def quota_case(tmp_path: Path) -> tuple[Cluster, list[Job], set[str]]:
    """Tenant b may not borrow; its second job waits for its quota: b1 is in its way, a1 is not."""
    cluster = inventory(tmp_path, 4, "n[1-3]", "  a: {quota_gpus: 8}\n  b: {quota_gpus: 4, borrow_limit_gpus: 0}\n")
    jobs = [Job(job_id="b1", tenant="b", gpus=4, duration_s=7200, submit_time_s=T0, gpus_per_node=4),
            Job(job_id="a1", tenant="a", gpus=4, duration_s=7200, submit_time_s=T0, gpus_per_node=4),
            Job(job_id="b2", tenant="b", gpus=4, duration_s=600, submit_time_s=T0 + 60, gpus_per_node=4)]
    return cluster, jobs, {"b1"}


def reservation_case(tmp_path: Path) -> tuple[Cluster, list[Job], set[str]]:
    """Two 8-GPU nodes with 3 GPUs free each: a job of 4 GPUs on one node cannot start and holds a
    reservation on the node whose job ends first (x's): x is in its way, y is not."""
    cluster = inventory(tmp_path, 8, "n[1-2]", "  a: {quota_gpus: 16}\n")
    jobs = [Job(job_id="x", tenant="a", gpus=5, duration_s=3600, submit_time_s=T0),
            Job(job_id="y", tenant="a", gpus=5, duration_s=7200, submit_time_s=T0),
            Job(job_id="w", tenant="a", gpus=4, duration_s=600, submit_time_s=T0 + 60, gpus_per_node=4)]
    return cluster, jobs, {"x"}


def daemon_on_fake_cluster(tmp_path: Path, cluster: Cluster, jobs: list[Job],
                           policy: Policy) -> tuple[ManualClock, FakeCluster, Daemon]:
    """The daemon over `jobs` on the fake cluster, its state under `tmp_path`, on a manual clock at T0."""
    clock = ManualClock(T0)
    state = tmp_path / "state"
    state.mkdir()
    body = FakeCluster(cluster, jobs, state, start_s=T0)
    audit = AuditLog(state / "audit.jsonl")
    return clock, body, Daemon(body, policy, DaemonStore(state), audit, Alerts(audit), clock=clock)


class DaemonJobsOnNode:
    """A class source that knows which of the daemon's jobs run on this node's GPUs (as a Slurm or pod
    source does: the same job ids the daemon sees)."""

    def __init__(self, body: FakeCluster, node: str) -> None:
        self.body, self.node = body, node

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        return {slot.gpu_index: GpuJob(r.job.job_id, r.job.job_class, r.job.tenant)
                for r in self.body.running.values() for slot in r.slots if slot.node == self.node}

    def work_waiting(self) -> WorkWaiting:
        return NOTHING_WAITS


@pytest.mark.parametrize("case", [quota_case, reservation_case], ids=["quota-wait", "reservation-wait"])
def test_the_replay_the_daemon_and_the_agents_lift_the_caps_of_the_same_jobs(
        tmp_path: Path, case: Callable[[Path], tuple[Cluster, list[Job], set[str]]]) -> None:
    cluster, jobs, expected = case(tmp_path)
    policy = load_policy("default")
    assert policy.capping.relax_when_queued

    # The replay: the simulator's own engine and job runner, stopped once the third job waits.
    replay = Simulation(cluster, policy, jobs, until_s=UNTIL_S)
    replay.run()
    replay_running = {job_id: set(r.nodes) for job_id, r in replay.work.running.items()}
    assert len(replay_running) == 2 and not replay.work.no_slack  # slack: only the guard lifts caps
    assert set(replay.pacer.lifted) == expected  # one of the two running jobs, as the slack rule says

    # The daemon on the fake cluster, ticking each minute over the same jobs.
    clock, body, daemon = daemon_on_fake_cluster(tmp_path, cluster, jobs, policy)
    while clock.now_s < T0 + UNTIL_S:
        clock.now_s += 60
        assert daemon.tick().ok
    assert {job_id: set(r.nodes) for job_id, r in body.running.items()} == replay_running
    signal = daemon.waiting_signal()
    assert signal["uncapped_job_ids"] == sorted(expected)
    assert signal["capped_job_ids"] == sorted(set(replay_running) - expected)
    for job_id, running in body.running.items():  # the daemon's own GPUs: lifted exactly where the replay lifts
        limits = {body.gpu_limit_w(slot.node, slot.gpu_index) for slot in running.slots}
        assert (limits == {DEFAULT_W}) == (job_id in expected), (job_id, limits)

    # The agents, one per node, asking the daemon over HTTP which jobs run uncapped.
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    url = "http://{}:{}".format(*server.address)
    lifted_live: set[str] = set()
    try:
        for node in sorted({n for nodes in replay_running.values() for n in nodes}):
            gpus = cluster.node_types[cluster.nodes[0].type_name].gpus
            fake = FakeNvml(make_gpus(f"{gpus}xA100"), clock=clock)
            source = DaemonWaiting(DaemonJobsOnNode(body, node), url, clock=clock)
            agent = Agent(NvmlBackend(lib=fake, clock=clock), policy.capping, source,
                          Journal(tmp_path / f"journal-{node}.jsonl"), clock=clock, node=node)
            agent.start()
            on_gpu = source.jobs([])
            for index in range(gpus):  # busy GPUs draw enough for a cap to bind
                fake.set_load(index, 0.95 if index in on_gpu else 0.0, [4000 + index] if index in on_gpu else [])
            agent.tick()
            assert source.problem is None
            for index, job in on_gpu.items():
                if fake.gpus[index].limit_w == DEFAULT_W:
                    lifted_live.add(job.job_id)
                else:
                    assert fake.gpus[index].limit_w < DEFAULT_W
            agent.stop()
    finally:
        server.stop()
    assert lifted_live == expected


def test_an_agent_lifts_every_cap_while_work_waits_when_the_daemon_does_not_name_the_jobs() -> None:
    """The fail-safe form: an old daemon (no per-job lists) or a job the daemon did not judge."""
    old = WorkWaiting(("w",))
    assert old.lifts_cap("a") and old.lifts_cap(None)
    named = WorkWaiting(("w",), uncapped=frozenset({"a"}), judged=frozenset({"a", "b"}))
    assert named.lifts_cap("a") and not named.lifts_cap("b")
    assert named.lifts_cap("unknown") and named.lifts_cap(None)  # not judged: lifted while work waits
    assert not WorkWaiting((), uncapped=frozenset(), judged=frozenset({"b"})).lifts_cap("unknown")  # nothing waits
    assert named.with_no_slack(True).lifts_cap("b")  # no slack: every cap lifts


@pytest.mark.parametrize(("forecasts", "sums"), [(True, 1), (False, 0)])
def test_the_daemon_sums_the_demand_once_a_tick_and_only_when_a_forecast_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forecasts: bool, sums: int) -> None:
    """The capping forecast and the sleep forecast both observe running + pending GPUs: an O(jobs) sum, taken once a
    tick for both, and not at all when neither forecast is on. The tick's decisions are the same either way."""
    from dataclasses import replace

    import greengpu.capping.forecast_caps as forecast_caps
    import greengpu.control.daemon.service as service

    cluster, jobs, _ = quota_case(tmp_path)
    policy = load_policy("default")
    if forecasts:  # the shipped default asks the capping forecast; the sleep forecast is turned on as well
        policy = replace(policy, sleep=replace(policy.sleep, use_forecast=True))
    else:
        policy = replace(policy, capping=replace(policy.capping, forecast_slack=False),
                         sleep=replace(policy.sleep, use_forecast=False, warm_reserve_from_forecast=False))
    summed = [0]
    offered_gpus = forecast_caps.offered_gpus

    def counting(snapshot):  # noqa: ANN001, ANN202
        summed[0] += 1
        return offered_gpus(snapshot)

    monkeypatch.setattr(service, "offered_gpus", counting)
    monkeypatch.setattr(forecast_caps, "offered_gpus", counting)
    clock, body, daemon = daemon_on_fake_cluster(tmp_path, cluster, jobs, policy)
    assert daemon.caps.active == forecasts
    assert (policy.sleep.enabled and policy.sleep.forecasts_demand) == forecasts
    for tick in range(1, 4):
        clock.now_s += 60
        assert daemon.tick().ok
        assert summed[0] == sums * tick
    assert len(body.running) == 2  # the quota case's two jobs run, the third waits
