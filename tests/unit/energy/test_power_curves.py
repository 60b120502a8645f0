"""Per-class power curves: a GPU never draws above its limit nor below idle; inference slows by its
clock-bound share only; the default's inference clock follows from the curve and the budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, public_data
from hypothesis import given, settings
from hypothesis import strategies as st
from schedkit import node_type

from greengpu.capping.cap_decision import busy_effect, constraints_of, decide
from greengpu.capping.gpu_power import gpu_setting, observe_typed_gpu
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.energy.curves import CLASS_CURVES, INFERENCE, TRAINING, curve_for, gpu_draw
from greengpu.energy.inference_curve import (
    INFERENCE_CLOCK_BOUND_SHARE,
    ItlPoint,
    clock_at_power,
    clock_limit_curve,
    clock_power_factor,
    fit_clock_bound_share,
)
from greengpu.model import JOB_CLASSES, NodeType
from greengpu.policy import CappingPolicy, ClassCapping


def shipped_node_types() -> list[NodeType]:
    found: dict[str, NodeType] = {}
    for path in sorted((REPO / "examples").glob("*.cluster.yaml")):
        for name, node_type_ in load_cluster(path).node_types.items():
            found.setdefault(f"{path.name}:{name}", node_type_)
    return list(found.values())


NODE_TYPES = shipped_node_types()
CLASSES = [*JOB_CLASSES, None, "unknown-class"]


@st.composite
def gpu_settings(draw: st.DrawFn) -> tuple[NodeType, str | None, float | None, float | None, float]:
    gpu = draw(st.sampled_from(NODE_TYPES))
    limit = draw(st.none() | st.floats(gpu.gpu_min_limit_w, gpu.gpu_max_w))
    clock = draw(st.none() | st.floats(0.01, 1.0))
    utilisation = draw(st.floats(0.0, 1.0))
    return gpu, draw(st.sampled_from(CLASSES)), limit, clock, utilisation


def test_the_shipped_node_types_accept_no_limit_below_idle() -> None:
    # The property below needs it: a limit under idle power could not be met by any draw.
    assert len(NODE_TYPES) >= 4
    assert all(t.gpu_idle_w <= t.gpu_min_limit_w <= t.gpu_max_w for t in NODE_TYPES)


@settings(max_examples=400, deadline=None)
@given(gpu_settings())
def test_a_gpu_never_draws_above_its_limit_nor_below_idle(case: tuple[NodeType, str | None, float | None,
                                                                       float | None, float]) -> None:
    gpu, job_class, limit_w, clock, utilisation = case
    power_w, speed = gpu_draw(gpu, job_class, limit_w, clock, utilisation)
    ceiling_w = gpu.gpu_max_w if limit_w is None else limit_w
    assert gpu.gpu_idle_w - 1e-9 <= power_w <= ceiling_w + 1e-9
    assert 0.0 < speed <= 1.0
    if limit_w is None and clock is None:
        assert speed == 1.0


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NODE_TYPES), st.sampled_from(CLASSES),
       st.sampled_from(["efficiency", "clocks", "fixed", "off"]), st.floats(0.0, 1.0),
       st.floats(0.05, 1.0), st.floats(0.0, 2000.0), st.booleans())
def test_every_decision_draws_at_most_its_limit(gpu: NodeType, job_class: str | None, mode: str, budget: float,
                                                clock: float, limit_w: float, not_binding: bool) -> None:
    rule = ClassCapping(mode, max_slowdown=budget, clock_fraction=clock, limit_w=limit_w)
    policy = CappingPolicy(enabled=True, classes={c: rule for c in JOB_CLASSES if c}, idle_to_min_limit=True,
                           switch_to_clocks_when_not_binding=True)
    decision = decide(job_class, policy, constraints_of(gpu), 1410, cap_not_binding=not_binding)
    power_w, speed = busy_effect(decision, gpu)
    assert gpu.gpu_idle_w - 1e-9 <= power_w <= (decision.limit_w or gpu.gpu_max_w) + 1e-9
    if job_class is not None and mode in ("efficiency", "clocks"):
        # the replay's slowdown is the one the decision expected, and within the class's budget
        assert 1.0 / speed - 1.0 == pytest.approx(decision.expected_slowdown, abs=1e-9)
        assert decision.expected_slowdown <= budget + 1e-9


def test_the_curves_per_class() -> None:
    assert curve_for("training") is TRAINING and curve_for("batch") is TRAINING
    assert curve_for("inference") is INFERENCE and curve_for("interactive") is INFERENCE
    assert curve_for(None) is TRAINING and curve_for("something-new") is TRAINING  # the cautious one
    assert set(CLASS_CURVES) == set(JOB_CLASSES)


def test_inference_at_080_clock_saves_about_what_was_measured() -> None:
    # The field figure for memory-bound inference: about -20% clock, -30% power, +5% latency; ML.ENERGY's
    # median clock-bound share puts the slowdown at 0.35 x (1 / 0.8 - 1) = 8.7%, an upper bound.
    h100 = NodeType(name="h100", gpus=8, gpu_model="H100", gpu_idle_w=75, gpu_max_w=700, gpu_min_limit_w=200,
                    host_idle_w=900, host_sleep_w=10, boot_s=300)
    power_w, speed = gpu_draw(h100, "inference", clock_fraction=0.8)
    saving, slowdown = 1 - power_w / 700, 1 / speed - 1
    assert 0.25 <= saving <= 0.35
    assert slowdown == pytest.approx(INFERENCE_CLOCK_BOUND_SHARE * 0.25)
    assert 0.03 <= slowdown <= 0.10
    # The same clock on compute-bound (training) work: the same power, 25% slower.
    assert gpu_draw(h100, "training", clock_fraction=0.8) == (pytest.approx(power_w), pytest.approx(0.8))


def test_the_defaults_inference_clock_is_what_the_curve_and_budget_allow() -> None:
    policy = load_policy("default").capping
    rule = policy.classes["inference"]
    a100 = node_type(8)
    decision = decide("inference", policy, constraints_of(a100), 1410)
    allowed = INFERENCE.clock_fraction_within(rule.max_slowdown, rule.clock_fraction)
    compute_bound = 1 / (1 + rule.max_slowdown)  # what the decision was before the inference curve
    assert decision.clock_fraction == pytest.approx(allowed)
    assert rule.clock_fraction <= allowed < compute_bound
    assert INFERENCE.clock_slowdown(allowed) == pytest.approx(min(rule.max_slowdown,
                                                                   INFERENCE.clock_slowdown(rule.clock_fraction)))
    # The tick asks the same question for a live GPU: the same decision.
    seen = observe_typed_gpu("n1", 0, a100, "inference")
    live = gpu_setting(seen, policy, False)
    assert live == decide("inference", policy, constraints_of(a100), seen.max_clock_mhz, host_share_w=seen.host_share_w)
    assert live.clock_fraction == decision.clock_fraction
    # and the replay's draw follows the inference curve: less power than the compute-bound clock gave
    power_w, speed = busy_effect(decision, a100)
    before_w = a100.gpu_idle_w + (a100.gpu_max_w - a100.gpu_idle_w) * compute_bound ** 2
    assert power_w < before_w and 1 / speed - 1 <= rule.max_slowdown + 1e-9


def test_the_clock_bound_share_fit_recovers_a_known_line() -> None:
    # ITL = 10 + 0.1 x batch: at batches 10, 20, 40 the shares are 1/11, 2/12, 4/14 (median 2/12).
    line = [ItlPoint(("m", "H100"), b, 10 + 0.1 * b) for b in (10, 20, 40)]
    falling = [ItlPoint(("f", "H100"), b, 20 - 0.1 * b) for b in (10, 20, 40)]  # a line that falls: left out
    short = [ItlPoint(("s", "H100"), b, 5 + b) for b in (1, 2)]  # two batch sizes: no line to trust
    fit = fit_clock_bound_share(line + falling + short)
    assert fit["share"] == pytest.approx(2 / 12)
    assert fit["groups"] == 1 and fit["configurations"] == 3
    with pytest.raises(ValueError, match="no group"):
        fit_clock_bound_share(short)


def test_the_inference_limit_curve_lowers_the_clock_until_power_meets_the_limit() -> None:
    curve = clock_limit_curve(0.35, idle_fraction=0.11)
    assert curve.power_factor == curve.fractions  # the cap binds on a full-load GPU
    assert curve.at(1.0) == (1.0, 1.0)
    assert all(a >= b for a, b in zip(curve.time_factor, curve.time_factor[1:], strict=False))
    clock = clock_at_power(0.8, 0.11)
    assert clock_power_factor(clock, 0.11) == pytest.approx(0.8)
    assert curve.at(0.8)[0] == pytest.approx(1 + 0.35 * (1 / clock - 1), abs=1e-3)
    assert INFERENCE.limit == clock_limit_curve(INFERENCE_CLOCK_BOUND_SHARE)
    # an inference job capped to 80% runs slower than at an 80% clock, for the same power saving or less
    assert INFERENCE.limit.at(0.8)[0] > 1.0


def test_the_replay_caps_through_the_same_decision_and_never_above_the_limit() -> None:
    from greengpu.model import Job
    from greengpu.sim.nodes import SimNode
    from greengpu.sim.pace import Pacer

    cluster = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
    policy = load_policy("default").capping
    pacer = Pacer(cluster, policy)
    for type_name, gpu in cluster.node_types.items():
        node = SimNode("n", type_name, gpu.gpus, gpu.gpu_idle_w, gpu.host_idle_w, gpu.host_sleep_w, gpu.boot_s)
        for job_class in JOB_CLASSES:
            job = Job("j", "t", gpus=1.0, duration_s=60.0, job_class=job_class)
            decision = gpu_setting(pacer.observation(node, 0, job_class), policy, False)
            power_w, speed = pacer.effect(job, node)
            assert (power_w, speed) == busy_effect(decision, gpu)
            assert power_w <= (decision.limit_w or gpu.gpu_max_w)


def test_the_fit_script_reprints_the_shipped_curves(tmp_path: Path) -> None:
    # scripts/fit_power_curves.py is how the shipped figures are reproduced: on the bundled Zeus traces it
    # prints the shipped training curve; on files shaped like ML.ENERGY's it fits the clock-bound share.
    from greengpu.energy.power_model import TRAINING_CURVE

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for task in ("lm-arena-chat", "gpqa", "sourcegraph-fim", "image-chat"):
        configurations = [{"model_id": f"{task}-m", "gpu_model": "H100", "num_gpus": 1, "tensor_parallel": 1,
                           "expert_parallel": 1, "data_parallel": 1, "avg_batch_size": b,
                           "median_itl_ms": 10 + 0.1 * b, "avg_power_watts": 490.0} for b in (10, 20, 40)]
        (tasks / f"{task}.json").write_text(json.dumps({"configurations": configurations}))
    script = REPO / "scripts" / "fit_power_curves.py"
    done = subprocess.run([sys.executable, str(script), "--zeus", str(public_data("zeus-power-limit-traces")),
                           "--mlenergy", str(tasks)], capture_output=True, text=True, check=True, timeout=120)
    assert f"  time_factor   {TRAINING_CURVE.time_factor}" in done.stdout
    assert f"  power_factor  {TRAINING_CURVE.power_factor}" in done.stdout
    assert "12 configurations in 4 groups" in done.stdout
    assert f"clock-bound share: median {2 / 12:.3f}" in done.stdout
    assert "quartiles 0.70, 0.70, 0.70" in done.stdout  # 490 W of a 700 W H100
