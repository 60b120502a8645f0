"""The replay's cloud placements are the tick's capacity rule's decisions (one rule for every body)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import REPO
from spot_traces import training_overflow, with_deadlines_and_inference

from greengpu.brain.capacity_choice import CapacityQuestion, choose_capacity
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.sim.cloud import CloudPools
from greengpu.sim.cloud_choice import CloudChooser
from greengpu.sim.engine import Simulation


@pytest.mark.parametrize("trace", [training_overflow, with_deadlines_and_inference])
def test_every_cloud_placement_is_the_pure_rule_s_answer(trace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[float, CapacityQuestion]] = []
    placed: list[tuple[float, str, str, str]] = []
    question, place = CloudChooser.question, CloudPools._place

    def recording_question(self: CloudChooser, job: Any, wait: Any, now_s: float,
                           reserved_start_s: float | None = None) -> CapacityQuestion:
        found = question(self, job, wait, now_s, reserved_start_s)
        asked.append((now_s, found))
        return found

    def recording_place(self: CloudPools, waiting: Any, kind: Any, pool: Any, room: Any, now_s: float) -> None:
        placed.append((now_s, waiting.job.job_id, kind, pool.name))
        place(self, waiting, kind, pool, room, now_s)

    monkeypatch.setattr(CloudChooser, "question", recording_question)
    monkeypatch.setattr(CloudPools, "_place", recording_place)
    policy = load_policy("default")
    result = Simulation(load_cluster(REPO / "examples" / "burst-cloud.cluster.yaml"), policy, trace(0),
                        seed=0).run().to_json()
    # The pure function, asked again on the replay's questions, names exactly the placements the replay made.
    expected = []
    for now_s, found in asked:
        chosen = choose_capacity(found, policy.spot)
        if chosen.kind != "wait":
            assert chosen.pool is not None
            expected.append((now_s, chosen.job_id, chosen.kind, chosen.pool))
    assert placed == expected
    assert any(kind == "spot" for _, _, kind, _ in placed)  # the replay did burst to spot
    per_pool = sum(sum(p["placements_by_class"].values()) for p in result["cloud_pools"].values())
    assert per_pool == len(placed)
