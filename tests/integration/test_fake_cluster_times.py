"""The fake cluster stamps each change when it happened, not when a tick looked: a node asleep `SUSPEND_S` after
its suspend, awake `boot_s` after its wake-up, idle from the moment its last job ended. A replay stamps them at
its events' times, and the sleep lever reads them (idle timeout, minimum times awake and asleep), so a daemon
ticking less often than the events must still see the replay's times (test_differential_one_brain)."""

from __future__ import annotations

from pathlib import Path

from inventories import SITE

from greengpu.config.inventory import load_cluster
from greengpu.control.fakes.fake_cluster import SUSPEND_S, FakeCluster
from greengpu.model import GpuSlot, Job, PlaceJob, PowerState, SleepNode, WakeNode

T0 = 1_700_000_000.0
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")


def test_changes_are_stamped_at_the_time_they_happened(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-2]\", type: a100x4}}\n")
    cluster = load_cluster(path)
    state = tmp_path / "state"
    state.mkdir()
    job = Job(job_id="j", tenant="a", gpus=1, duration_s=500, submit_time_s=T0)
    body = FakeCluster(cluster, [job], state, start_s=T0)
    body.observe(T0, 0, 0)
    body.act(PlaceJob("j", (GpuSlot("n2", 0),)), T0)
    body.act(SleepNode("n1", "idle"), T0 + 10)
    seen = body.observe(T0 + 1000, 0, 0)  # long after the suspend and the job's end
    assert seen.snapshot.node_states["n1"].power is PowerState.ASLEEP
    assert seen.snapshot.node_states["n1"].since_s == T0 + 10 + SUSPEND_S
    assert body.finished == {"j": T0 + 500}
    assert [v.idle_since_s for v in seen.sleep.idle_awake if v.name == "n2"] == [T0 + 500]
    body.act(WakeNode("n1", "work"), T0 + 1000)
    seen = body.observe(T0 + 5000, 0, 0)
    assert "n1" not in seen.snapshot.node_states  # awake
    assert [(v.power_since_s, v.idle_since_s) for v in seen.sleep.idle_awake if v.name == "n1"] == [
        (T0 + 1180, T0 + 1180)]  # up boot_s after its wake-up, idle since then
