"""Cloud pools in the replay (greengpu/sim/cloud.py): bursting, interruptions, checkpoints, deadlines, seeds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cluster, load_cluster_text
from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Job
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation

HOUR = 3600.0
REPO = Path(__file__).resolve().parents[3]


CLUSTER_TEXT = """\
site: {{pue: 1.2, price_per_kwh: 0.1}}
node_types:
  a8: {{gpus: 8, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 400,
        host_sleep_w: 8, boot_s: 300}}
  c8: {{gpus: 8, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 400,
        host_sleep_w: 8, boot_s: 120}}
nodes:
  - {{name: n1, type: a8}}
tenants:
  t: {{quota_gpus: 8}}
pools:
  sp: {{type: c8, spot: true, price_per_hour: 5.47, interruptions_per_hour: {spot_rate}, max_nodes: {max_nodes}}}
{on_demand}"""


def cluster(spot_rate: float = 0.1, max_nodes: int = 4, on_demand: bool = True) -> Cluster:
    pool = f"  od: {{type: c8, price_per_hour: 24.48, max_nodes: {max_nodes}}}\n" if on_demand else ""
    return load_cluster_text(CLUSTER_TEXT.format(spot_rate=spot_rate, max_nodes=max_nodes, on_demand=pool),
                             "burst.yaml")


def spot_policy(**spot: Any) -> Policy:
    base = load_policy("always-on")  # no capping or sleep: only the spot lever differs
    return replace(base, name="spot", spot=replace(base.spot, enabled=True, require_checkpointing=False, **spot))


BLOCKER = Job("blocker", "t", 8, 200 * HOUR, submit_time_s=0.0, interruptible=False, priority=100)
"""Holds the only on-premises node for the whole test: everything else waits for capacity."""


def run(jobs: list[Job], policy: Policy, the_cluster: Cluster | None = None, seed: int = 0,
        until_s: float = 100 * HOUR) -> dict[str, Any]:
    result = Simulation(the_cluster or cluster(), policy, [BLOCKER, *jobs], seed=seed, until_s=until_s).run()
    return result.to_json()


def pool_jobs(result: dict[str, Any], pool: str) -> dict[str, int]:
    jobs: dict[str, int] = result["cloud_pools"][pool]["placements_by_class"]
    return jobs


def test_long_job_without_checkpoints_stays_on_demand_short_one_goes_to_spot() -> None:
    long = Job("long", "t", 8, 30 * HOUR, submit_time_s=10.0)
    short = Job("short", "t", 8, 1 * HOUR, submit_time_s=10.0)
    result = run([long], spot_policy())
    assert pool_jobs(result, "od") == {"training": 1} and pool_jobs(result, "sp") == {}
    assert result["spot_share"] == 0.0
    result = run([short], spot_policy())
    assert pool_jobs(result, "sp") == {"training": 1} and pool_jobs(result, "od") == {}
    assert result["spot_share"] > 0.0
    assert result["cloud_cost"] > 0 and result["cost"] > result["cloud_cost"]  # electricity plus cloud


def test_inference_never_lands_on_spot_even_when_the_policy_lists_it() -> None:
    policy = spot_policy(classes=("training", "batch", "inference", "interactive"))
    jobs = [Job(f"i{k}", "t", 8, HOUR, submit_time_s=10.0 + k, job_class=c, interruptible=True,
                checkpoint_interval_s=600.0) for k, c in enumerate(["inference", "interactive", "training"])]
    result = run(jobs, policy)
    assert pool_jobs(result, "sp") == {"training": 1}
    assert pool_jobs(result, "od") == {"inference": 1, "interactive": 1}
    only_spot = run(jobs, policy, cluster(on_demand=False))
    assert pool_jobs(only_spot, "sp") == {"training": 1}
    assert only_spot["jobs_completed"] == 1  # only the training job: no on-demand pool, so
    assert only_spot["jobs_not_started"] == 2  # inference and interactive wait on-premises behind the blocker


def test_interruption_with_notice_longer_than_checkpoint_loses_no_work() -> None:
    job = Job("ckpt", "t", 8, 4 * HOUR, submit_time_s=10.0, checkpoint_interval_s=1800.0)
    quick = run([job], spot_policy(checkpoint_cost_s=60.0, notice_s=120.0), cluster(spot_rate=2.0, on_demand=False))
    assert quick["interruptions"] >= 3
    assert quick["lost_gpu_hours"] == 0.0
    assert quick["jobs_completed"] == 1 and quick["preemptions"] >= 3
    # The same interruptions with a checkpoint that does not fit in the notice: the work since the last one is lost.
    # (The lost-work bound would keep it off spot at this rate: lifted here, where the loss itself is the point.)
    slow = run([job], spot_policy(checkpoint_cost_s=300.0, notice_s=120.0, max_expected_lost_fraction=1.0),
               cluster(spot_rate=2.0, on_demand=False))
    assert slow["interruptions"] >= 3
    assert slow["lost_gpu_hours"] > 0.0
    assert slow["cloud_pools"]["sp"]["lost_gpu_hours"] == slow["lost_gpu_hours"]


def test_deadline_job_behind_schedule_moves_to_on_demand_and_meets_its_deadline() -> None:
    due_s = 2 * HOUR + 1200.0
    job = Job("due", "t", 8, 2 * HOUR, submit_time_s=10.0, checkpoint_interval_s=1800.0, deadline_s=due_s)
    busy = cluster(spot_rate=6.0)
    policy = spot_policy()
    with_deadline = run([job], policy, busy, seed=3)
    assert with_deadline["interruptions"] >= 1
    assert pool_jobs(with_deadline, "sp")["training"] >= 1  # it started on spot, ahead with slack ...
    assert pool_jobs(with_deadline, "od") == {"training": 1}  # ... and finished on on-demand
    assert with_deadline["deadline_misses"] == 0
    # Spot alone under the same interruptions would have missed it.
    spot_alone = run([replace(job, deadline_s=None)], policy, cluster(spot_rate=6.0, on_demand=False), seed=3)
    assert spot_alone["jobs_completed"] == 1
    finish = spot_alone["makespan_s"]  # its finish: the blocker never finishes
    assert finish > due_s, finish


def test_deadline_job_falling_behind_on_spot_moves_at_a_checkpoint_before_an_interruption_and_meets_it() -> None:
    """The proactive move: under two interruptions per node-hour the job loses time at each one; at a periodic
    checkpoint, once rule 4 no longer keeps it on spot, it leaves with that checkpoint's work saved, instead of
    staying until the next interruption. Spot alone would have missed the deadline."""
    due_s = 4 * HOUR + 1500.0
    job = Job("due", "t", 8, 4 * HOUR, submit_time_s=10.0, checkpoint_interval_s=1800.0, deadline_s=due_s)
    sim = Simulation(cluster(spot_rate=2.0), spot_policy(), [BLOCKER, job], seed=6, until_s=100 * HOUR)
    result = sim.run().to_json()
    assert sim.cloud is not None
    assert [job_id for job_id, _ in sim.cloud.moves] == ["due"]
    moved_s = sim.cloud.moves[0][1]
    assert moved_s < 10.0 + due_s
    assert result["interruptions"] >= 2  # it fell behind by being interrupted on spot first
    assert pool_jobs(result, "od") == {"training": 1}  # the move, and nothing after it, went to on-demand
    assert result["lost_gpu_hours"] == 0.0  # it moved at a checkpoint; the interruptions' notices saved the rest
    assert result["deadline_misses"] == 0 and result["jobs_completed"] == 1
    assert result["makespan_s"] <= 10.0 + due_s
    spot_alone = run([replace(job, deadline_s=None)], spot_policy(), cluster(spot_rate=2.0, on_demand=False), seed=6)
    assert spot_alone["makespan_s"] > 10.0 + due_s


def test_deadline_job_with_slack_stays_on_spot_at_its_checkpoints() -> None:
    """Ahead of the uniform rate with slack to spare, a deadline job on spot is checked at each checkpoint and
    stays: no move, no on-demand placement."""
    job = Job("roomy", "t", 8, 2 * HOUR, submit_time_s=10.0, checkpoint_interval_s=900.0, deadline_s=10 * HOUR)
    sim = Simulation(cluster(spot_rate=0.0), spot_policy(), [BLOCKER, job], seed=0, until_s=100 * HOUR)
    result = sim.run().to_json()
    assert sim.cloud is not None and sim.cloud.moves == []
    assert pool_jobs(result, "sp") == {"training": 1} and pool_jobs(result, "od") == {}
    assert result["deadline_misses"] == 0 and result["preemptions"] == 0


def test_same_seed_same_result_different_seed_different_interruptions() -> None:
    jobs = [Job(f"j{k}", "t", 8, 3 * HOUR, submit_time_s=10.0 + 600 * k, checkpoint_interval_s=900.0)
            for k in range(6)]
    policy = spot_policy(checkpoint_cost_s=300.0)

    def figures(seed: int) -> dict[str, Any]:
        result = run(jobs, policy, cluster(spot_rate=1.0, max_nodes=8), seed=seed)
        result.pop("sim_wall_s")
        return result

    first, again, other = figures(7), figures(7), figures(8)
    assert first == again
    assert first["interruptions"] > 0
    assert (first["makespan_s"], first["lost_gpu_hours"]) != (other["makespan_s"], other["lost_gpu_hours"])


def test_always_on_overflows_to_on_demand_only_and_idle_cloud_nodes_stop() -> None:
    jobs = [Job(f"j{k}", "t", 8, HOUR, submit_time_s=10.0, checkpoint_interval_s=600.0) for k in range(3)]
    result = run(jobs, load_policy("always-on"))
    assert pool_jobs(result, "sp") == {} and pool_jobs(result, "od") == {"training": 3}
    assert result["spot_share"] == 0.0 and result["interruptions"] == 0
    # Three nodes, each paid from its request through its boot (120 s), the hour of work, and an idle boot's length.
    assert result["cloud_pools"]["od"]["node_hours"] * 3600 == 3 * (120.0 + HOUR + 120.0)
    assert result["cloud_cost"] == pytest.approx(3 * (120.0 + HOUR + 120.0) / HOUR * 24.48)
    assert result["wait_s"]["p95"] == 120.0  # the cloud node's boot


def test_cluster_without_pools_reports_zero_cloud_figures() -> None:
    no_pools = replace(cluster(), pools={})
    result = run([Job("j", "t", 8, HOUR, submit_time_s=10.0, deadline_s=2 * HOUR)], spot_policy(), no_pools)
    assert (result["spot_share"], result["cloud_cost"], result["interruptions"]) == (0.0, 0.0, 0)
    assert result["deadline_misses"] == 1  # it waits behind the blocker past its deadline
    assert "cloud_pools" not in result


def test_simulate_command_seed_drives_interruptions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "burst.yaml"
    inventory.write_text(CLUSTER_TEXT.format(spot_rate=3.0, max_nodes=4, on_demand=""))
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration_s,gpus,tenant,priority,class,interruptible,checkpoint_interval_s\n"
                     "blocker,0,720000,8,t,100,training,false,\n"
                     + "".join(f"j{k},{10 + k},14400,8,t,0,training,true,1800\n" for k in range(4)))

    def simulate(seed: int) -> dict[str, Any]:
        args = ["simulate", "--trace", str(trace), "--cluster", str(inventory), "--policy", "default", "--json",
                "--until", "360000", "--seed", str(seed)]
        assert main(args) == 0, capsys.readouterr().err
        result: dict[str, Any] = json.loads(capsys.readouterr().out)["results"][0]
        result.pop("sim_wall_s")
        return result

    first, again, other = simulate(1), simulate(1), simulate(2)
    assert first == again and first["seed"] == 1
    assert first["interruptions"] > 0 and first["spot_share"] > 0
    assert first["cloud_pools"]["sp"]["interruptions"] == first["interruptions"]
    assert (first["makespan_s"], first["cloud_cost"]) != (other["makespan_s"], other["cloud_cost"])


def test_burst_example_is_the_stress_benchmarks_320_gpu_cluster_with_two_pools() -> None:
    example = load_cluster(REPO / "examples" / "burst-320.cluster.yaml")
    assert example.total_gpus == 320
    assert sorted((n.name, n.type_name, n.domain) for n in example.nodes) == sorted(
        (f"philly{i + 1:03d}", "p100x8" if i < 27 else "p100x4", f"rack{i // 21:02d}") for i in range(53))
    spot, on_demand = example.pools["aws-spot"], example.pools["aws-on-demand"]
    assert spot.spot and not on_demand.spot and spot.type_name == on_demand.type_name == "p3.16xlarge"
    assert spot.price_per_hour / on_demand.price_per_hour == pytest.approx(0.2236, abs=1e-4)


def test_full_pool_holds_work_until_its_nodes_free_then_a_gang_takes_both() -> None:
    jobs = [Job("a", "t", 8, HOUR, submit_time_s=10.0), Job("b", "t", 8, HOUR, submit_time_s=10.0),
            Job("gang", "t", 16, HOUR, submit_time_s=20.0)]
    result = run(jobs, load_policy("always-on"), cluster(max_nodes=2))
    assert pool_jobs(result, "od") == {"training": 3}
    # a and b start when their nodes are up (130 s) and end an hour later; the gang waits for both nodes.
    sim = Simulation(cluster(max_nodes=2), load_policy("always-on"), [BLOCKER, *jobs], until_s=100 * HOUR)
    sim.run()
    assert sim.first_start["a"] == sim.first_start["b"] == 130.0
    assert sim.first_start["gang"] == 130.0 + HOUR
    assert sim.finish_s["gang"] == 130.0 + 2 * HOUR
    # Two nodes, each paid from 10 s to an idle start-up's length after the gang ends.
    assert result["cloud_pools"]["od"]["node_hours"] * 3600 == pytest.approx(2 * (130.0 + 2 * HOUR + 120.0 - 10.0))
