"""The fake cluster paces a running job by the limits and clocks its GPUs hold, as the replay paces it
(greengpu.energy.job_pace): a capped job ends later, its paces survive a restart, a stopped job keeps
only the work it did by its last checkpoint, and GPUs released to their defaults run it at full speed."""

from __future__ import annotations

from pathlib import Path

from greengpu.config.inventory import load_cluster
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.energy import job_pace
from greengpu.model import GpuSlot, Job, KillJob, LockClocks, PlaceJob, SetPowerLimit

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def _cluster_and_job(tmp_path: Path, checkpoint_s: float | None = None) -> tuple[FakeCluster, Job]:
    cluster = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
    job = Job("j1", "postdocs", 2, 3600.0, submit_time_s=T0, job_class="training", checkpoint_interval_s=checkpoint_s)
    body = FakeCluster(cluster, [job], tmp_path, start_s=T0)
    body.observe(T0, 0, 0)
    body.act(PlaceJob("j1", (GpuSlot("lab-srv1", 0), GpuSlot("lab-srv1", 1))), T0)
    body.settle()
    return body, job


def test_a_capped_job_ends_when_its_gpus_setting_says(tmp_path: Path) -> None:
    body, job = _cluster_and_job(tmp_path)
    assert body.running["j1"].expected_end_s == T0 + 3600.0  # the GPUs hold their default limit: full speed
    node_type = body.cluster.node_types["a100x4"]
    body.observe(T0 + 600.0, 0, 0)
    body.act(SetPowerLimit("lab-srv1", 0, 200.0), T0 + 600.0)  # one GPU capped: the job runs at its pace
    body.settle()
    speed = job_pace.setting_speed(node_type, "training", 200.0, None, body.fakes["lab-srv1"].gpus[0].max_sm_clock_mhz)
    assert 0.0 < speed < 1.0
    capped_end_s = T0 + 600.0 + job_pace.run_s(3000.0, speed)
    assert body.running["j1"].expected_end_s == capped_end_s > T0 + 3600.0

    again = FakeCluster(body.cluster, [job], tmp_path, start_s=T0)  # a restart keeps the paces
    assert again.paces == body.paces and again.running["j1"].expected_end_s == capped_end_s
    again.observe(capped_end_s - 1.0, 0, 0)
    assert "j1" in again.running
    again.observe(capped_end_s, 0, 0)
    assert again.finished == {"j1": capped_end_s}


def test_locked_clocks_slow_it_and_released_gpus_speed_it_up(tmp_path: Path) -> None:
    body, _ = _cluster_and_job(tmp_path)
    max_mhz = body.fakes["lab-srv1"].gpus[1].max_sm_clock_mhz
    body.observe(T0 + 100.0, 0, 0)
    body.act(LockClocks("lab-srv1", 1, max_mhz // 2, max_mhz // 2), T0 + 100.0)
    body.settle()
    slow_end_s = body.running["j1"].expected_end_s
    assert slow_end_s > T0 + 3600.0
    body.observe(T0 + 700.0, 0, 0)
    body.release_gpus("test")  # fail-safe: every GPU back to its defaults, the job at full speed from now
    body.settle()
    done_s = job_pace.work_done_s(body.paces["j1"][:-1], T0 + 700.0)
    assert 100.0 < done_s < 700.0
    assert body.running["j1"].expected_end_s == T0 + 700.0 + job_pace.run_s(3600.0 - done_s, 1.0) < slow_end_s


def test_a_stopped_capped_job_keeps_the_work_it_did_by_its_checkpoint(tmp_path: Path) -> None:
    body, _ = _cluster_and_job(tmp_path, checkpoint_s=1000.0)
    body.act(SetPowerLimit("lab-srv1", 0, 150.0), T0)
    body.settle()
    speed = body.paces["j1"][-1][1]
    assert speed < 1.0
    body.observe(T0 + 1500.0, 0, 0)
    body.act(KillJob("j1", "test"), T0 + 1500.0)  # its last checkpoint at T0 + 1000 s of wall time
    assert body.pending["j1"].job.duration_s == 3600.0 - 1000.0 * speed
