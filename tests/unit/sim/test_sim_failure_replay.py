"""The failure model inside a replay: failures requeue the jobs on the GPU with their work since the last
checkpoint lost, the same seed gives the same figures, and without the model nothing changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.model import Job
from greengpu.sim.engine import Simulation
from greengpu.sim.failures import FailureModel, FailureReplay, GpuEvent, GpuEventKind, failure_replay
from greengpu.sim.traces import read_trace

REPO = Path(__file__).resolve().parents[3]
CLUSTER = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
JOBS = read_trace(REPO / "examples" / "lab-a100.week.trace.csv", "csv").jobs
FAILURE_KEYS = {"gpu_failures", "gpus_replaced_before_failing", "jobs_hit_by_failures",
                "jobs_hit_by_failures_by_class", "failure_lost_gpu_hours", "failure_lost_gpu_hours_by_class"}


def run(failures: FailureReplay | None, jobs: list[Job] = JOBS, policy: str = "default") -> dict[str, object]:
    values = Simulation(CLUSTER, load_policy(policy), jobs, failures=failures).run().to_json()
    values.pop("sim_wall_s")
    return values


def replay_of(seed: int, health_aware: bool) -> FailureReplay:
    origin_s = JOBS[0].submit_time_s
    model = FailureModel(seed=seed, hazard_ratio=1000.0).scaled(300)  # a week on ten GPUs: failures to see
    return failure_replay(CLUSTER, model, origin_s, origin_s + 14 * 86400.0, health_aware)


def test_without_a_failure_model_the_figures_are_what_they_were() -> None:
    plain = Simulation(CLUSTER, load_policy("default"), JOBS).run().to_json()
    plain.pop("sim_wall_s")
    assert run(None) == plain
    assert not FAILURE_KEYS & plain.keys()


def test_the_same_seed_gives_the_same_figures_and_every_job_still_completes() -> None:
    for health_aware in (False, True):
        first, second = run(replay_of(4, health_aware)), run(replay_of(4, health_aware))
        assert first == second
        assert first.keys() >= FAILURE_KEYS
        assert first["gpu_failures"] > 0
        assert first["jobs_completed"] == len(JOBS) and first["invariant_violations"] == 0


def test_a_failure_requeues_the_jobs_on_its_gpu_and_counts_their_lost_work() -> None:
    origin_s = JOBS[0].submit_time_s
    job = replace(JOBS[0], job_id="long", gpus=1, duration_s=7200.0, checkpoint_interval_s=1800.0,
                  job_class="training", interruptible=True, submit_time_s=origin_s)
    # Best fit puts it on the 2-GPU workstation; both its GPUs fail 2,500 s in, after a checkpoint at 1,800 s.
    events = tuple(GpuEvent(origin_s + 2500.0, "lab-ws1", gpu, GpuEventKind.FAILED) for gpu in (0, 1))
    replay = FailureReplay(FailureModel(), events, origin_s + 86400.0, False)
    values = run(replay, [job], "always-on")  # no caps, no sleep: exact times
    assert values["gpu_failures"] == 2
    assert values["jobs_hit_by_failures"] == 1
    assert values["failure_lost_gpu_hours"] == (2500.0 - 1800.0) / 3600.0
    assert values["jobs_completed"] == 1 and values["preemptions"] == 0
    # It lost 700 s and a server took it at once: it ends 700 s later than it would have.
    assert values["makespan_s"] == 7200.0 + 700.0
