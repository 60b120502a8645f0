"""Spot that saves money (issue 37): the +96% case now saves money, and a cloud job comes back on-premises."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from spot_traces import with_two_long_jobs

from greengpu.config.inventory import load_cluster, load_cluster_text
from greengpu.config.policy import load_policy
from greengpu.model import Job
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation

HOUR = 3600.0
REPO = Path(__file__).resolve().parents[3]


def replay(policy: Policy, jobs: list[Job], cluster_file: str = "burst-cloud") -> tuple[dict[str, Any], Simulation]:
    simulation = Simulation(load_cluster(REPO / "examples" / f"{cluster_file}.cluster.yaml"), policy, jobs, seed=0)
    return simulation.run().to_json(), simulation


def rent_at_once(policy: Policy) -> Policy:
    """The rule before issue 37: any wait for capacity rents, no job comes back, no bound on lost work."""
    return replace(policy, name="rent-at-once", spot=replace(policy.spot, waiting={}, come_back=False,
                                                              max_expected_lost_fraction=1.0))


def test_two_long_jobs_without_checkpoints_wait_on_premises_and_the_default_saves_money() -> None:
    """The +96% case: two 30 h 8-GPU jobs without checkpoints arrive at the peak, every on-premises GPU taken.
    Renting them on-demand for 30 h costs far more than waiting for the core's predicted start."""
    jobs = with_two_long_jobs(seed=0)
    always_on, _ = replay(load_policy("always-on"), jobs)
    default, simulation = replay(load_policy("default"), jobs)
    before, _ = replay(rent_at_once(load_policy("default")), jobs)
    assert default["cost"] < always_on["cost"]
    assert default["cost"] < before["cost"]
    for job_id in ("long0", "long1"):  # both ran on-premises, after a wait the tolerance of p95 absorbs
        assert job_id in simulation.first_start and job_id not in simulation.cloud.completed  # type: ignore[union-attr]
    assert default["deadline_misses"] <= always_on["deadline_misses"]
    assert default["wait_s"]["p95"] <= max(1.10 * always_on["wait_s"]["p95"], always_on["wait_s"]["p95"] + 60.0)
    on_spot = default["cloud_pools"]["aws-spot"]["placements_by_class"]
    assert on_spot.get("inference", 0) == 0 and on_spot.get("interactive", 0) == 0
    assert default["invariant_violations"] == 0 and default["jobs_completed"] == default["jobs"]


CLUSTER = """\
site: {pue: 1.2, price_per_kwh: 0.1}
node_types:
  a8: {gpus: 8, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 400,
       host_sleep_w: 8, boot_s: 300}
nodes:
  - {name: n1, type: a8}
tenants:
  t: {quota_gpus: 8}
pools:
  sp: {type: a8, spot: true, price_per_hour: 5.47, interruptions_per_hour: 0.0, max_nodes: 2}
  od: {type: a8, price_per_hour: 24.48, max_nodes: 2}
"""


def test_a_cloud_job_comes_back_on_premises_at_a_checkpoint_and_its_node_stops() -> None:
    base = load_policy("always-on")  # no capping or sleep: only the spot lever differs
    policy = replace(base, name="spot", spot=replace(load_policy("default").spot))
    blocker = Job("blocker", "t", 8, 2 * HOUR, submit_time_s=0.0, interruptible=False, priority=100)
    job = Job("ckpt", "t", 8, 10 * HOUR, submit_time_s=10.0, checkpoint_interval_s=1800.0)
    simulation = Simulation(load_cluster_text(CLUSTER, "c.yaml"), policy, [blocker, job], seed=0)
    result = simulation.run().to_json()
    assert simulation.cloud is not None
    # It rented spot at once (it can come back), and at its first checkpoint after the blocker ended it moved.
    assert [job_id for job_id, _ in simulation.cloud.come_backs] == ["ckpt"]
    moved_s = simulation.cloud.come_backs[0][1]
    assert 2 * HOUR <= moved_s <= 2 * HOUR + 1800.0 + 300.0
    assert result["come_backs"] == 1 and result["preemptions"] == 0 and result["lost_gpu_hours"] == 0.0
    assert "ckpt" not in simulation.cloud.completed and result["jobs_completed"] == 2
    # Its spot node stopped when it left: paid from its request to the move, not on for another start-up.
    assert result["cloud_pools"]["sp"]["node_hours"] * HOUR <= moved_s + 1.0
    # Renting at once without the move, it stays in the cloud to its end and costs more.
    stays = Simulation(load_cluster_text(CLUSTER, "c.yaml"), rent_at_once(policy), [blocker, job], seed=0)
    figures = stays.run().to_json()
    assert figures["come_backs"] == 0 and "ckpt" in stays.cloud.completed  # type: ignore[union-attr]
    assert figures["cost"] > result["cost"]


def test_simulate_headline_prints_total_cost_and_never_a_saving_when_it_rose() -> None:
    from greengpu.commands.simulate import headline

    base = {"policy": "always-on", "energy_kwh": 100.0, "co2_kg": 38.0, "cost": 1383.0, "currency": "USD"}
    rose = {"policy": "default", "energy_kwh": 31.7, "co2_kg": 12.0, "cost": 2707.0, "currency": "USD"}
    line = headline(rose, base)
    assert "68.3% less facility energy" in line and "68.4% less CO2" in line
    assert "2,707.00 USD against 1,383.00: 95.7% more" in line and "less" not in line.split("total cost")[1]
    fell = headline({**rose, "cost": 1000.0, "energy_kwh": 120.0}, base)
    assert "20.0% more facility energy" in fell and fell.endswith("27.7% less")
    assert headline({**base, "policy": "same"}, base).endswith("no change")


FULL_POOLS = CLUSTER.replace("max_nodes: 2", "max_nodes: 1")


def test_a_deadline_job_whose_slack_runs_out_with_the_cloud_full_gets_on_premises_room() -> None:
    """The cause of the misses: with every cloud pool full, a deadline job waited in the on-premises queue's order
    behind work without deadlines, its slack unseen. Now its slack running out raises it above the queue, and the
    core makes room by preempting interruptible work (which checkpoints first)."""
    jobs = [Job("onprem", "t", 8, 10 * HOUR, submit_time_s=0.0, checkpoint_interval_s=1800.0),
            Job("c1", "t", 8, 10 * HOUR, submit_time_s=10.0, checkpoint_interval_s=1800.0),
            Job("c2", "t", 8, 10 * HOUR, submit_time_s=20.0, checkpoint_interval_s=1800.0),
            Job("due", "t", 8, HOUR, submit_time_s=60.0, deadline_s=3 * HOUR)]
    results = {}
    for name in ("always-on", "default"):
        simulation = Simulation(load_cluster_text(FULL_POOLS, "c.yaml"), load_policy(name), jobs, seed=0)
        results[name] = simulation.run().to_json()
        if name == "default":
            assert "due" not in simulation.cloud.completed  # type: ignore[union-attr]  # on-premises first
            assert simulation.finish_s["due"] <= 60.0 + 3 * HOUR
    assert results["always-on"]["deadline_misses"] == 1
    assert results["default"]["deadline_misses"] == 0
    # The victim loses at most the work since its last periodic checkpoint (8 GPUs x 30 minutes).
    assert 0.0 < results["default"]["lost_gpu_hours"] <= 8 * 0.5
