"""Inputs for the fleet ledger's tests: small clusters with their own sites (PUE, price, carbon), and traces of
a few dozen jobs in a given month, so that several replays and daemons write one ledger in seconds."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import random
from pathlib import Path

from greengpu.cli import main

NODE_TYPE = ("{gpus: 2, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
             "host_sleep_w: 8, boot_s: 2, gpu_max_clock_mhz: 1410}")
SITES = {
    "east": "site: {pue: 1.2, price_per_kwh: 0.1, carbon_g_per_kwh: 300}\n",
    "west": "site: {pue: 1.4, price_per_kwh: 0.23, carbon_g_per_kwh: 120}\n",
    "burst": "site: {pue: 1.1, price_per_kwh: 0.17, carbon_g_per_kwh: 410}\n",
    "lab": "site: {pue: 1.3, price_per_kwh: 0.12, carbon_g_per_kwh: 380}\n",
}


def write_cluster(folder: Path, name: str, nodes: int = 4) -> Path:
    """`folder/NAME.cluster.yaml`: `nodes` two-GPU nodes and tenants a and b; its file stem is the run's cluster."""
    path = folder / f"{name}.cluster.yaml"
    path.write_text(SITES[name] + f"node_types:\n  g2: {NODE_TYPE}\nnodes:\n  - {{name: \"n[1-{nodes}]\", type: g2}}\n"
                    "tenants:\n  a: {quota_gpus: 8}\n  b: {quota_gpus: 8}\n")
    return path


def write_trace(path: Path, first: dt.datetime, jobs: int = 40, seed: int = 1, spread_s: float = 86_400.0) -> Path:
    """A canonical trace of `jobs` jobs submitted from `first` over `spread_s`, 10 min to 3 h long."""
    rng = random.Random(seed)
    rows = ["job_id,submit_time,duration_s,gpus,tenant,class"]
    for index in range(jobs):
        at = first + dt.timedelta(seconds=rng.uniform(0, spread_s))
        rows.append(f"j{index:03d},{at.isoformat()},{rng.randint(600, 10_800)},{rng.choice((1, 2))},"
                    f"{rng.choice('ab')},{rng.choice(('training', 'batch', 'inference'))}")
    path.write_text("\n".join(rows) + "\n")
    return path


def write_fast_trace(path: Path, jobs: int = 300, seed: int = 7) -> Path:
    """A trace for a daemon on the fake backend: short jobs in bursts from its start (seconds from 0)."""
    rng = random.Random(seed)
    rows, at = ["job_id,submit_time,duration_s,gpus,tenant,class"], 0.0
    for index in range(jobs):
        at += rng.choice((0.5, 1.0, 2.0))
        rows.append(f"j{index:04d},{at:.1f},{rng.randint(2, 8)},{rng.choice((1, 2))},{rng.choice('ab')},"
                    f"{rng.choice(('training', 'batch', 'inference'))}")
    path.write_text("\n".join(rows) + "\n")
    return path


def run_cli(*args: str) -> tuple[int, str, str]:
    """`greengpu ARGS` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def report_json(*args: str) -> dict:
    """`greengpu report ARGS --json`, which must succeed."""
    code, out, err = run_cli("report", *args, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


UNIT = {"cost": 0.01, "co2_kg": 0.001, "energy_kwh": 0.001, "gpu_hours": 0.001}


def units(value: float, key: str) -> int:
    """A figure in whole cents or grams (or thousandths of a kWh, of a GPU-hour)."""
    return round(value / UNIT[key])
