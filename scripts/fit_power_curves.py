"""Refit the power model's per-class curves from the public measurements and print them.

    python scripts/fit_power_curves.py --zeus data/zeus-power-limit-traces \
        --mlenergy PATH/TO/ml-energy-leaderboard/public/data/tasks

Training (and batch): the Zeus power-limit traces (`summary_power_*.csv`; Apache-2.0; You, Chung,
Chowdhury, NSDI'23), normalised to each workload's draw at its highest limit
(`greengpu.energy.power_model.fit_curve`). Inference (and interactive): the clock-bound share of a
decode step from the ML.ENERGY leaderboard's LLM and multimodal task files (`lm-arena-chat.json`,
`gpqa.json`, `sourcegraph-fim.json`, `image-chat.json` of ml-energy/leaderboard `public/data/tasks/`;
Chung et al., "The ML.ENERGY Benchmark", NeurIPS D&B 2025), `greengpu.energy.inference_curve`.
The figures it prints are the constants shipped in those two modules; docs/POWER-MODEL.md explains them.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from greengpu.energy.inference_curve import INFERENCE_LIMIT_CURVE, ItlPoint, fit_clock_bound_share
from greengpu.energy.power_model import Measurement, fit_curve, fit_error

LLM_TASKS = ("lm-arena-chat", "gpqa", "sourcegraph-fim", "image-chat")
TDP_W = {"H100": 700.0, "B200": 1000.0}
"""Default power limits of the leaderboard's GPUs (H100 SXM, B200), for the draw-to-limit figures."""


def zeus_rows(folder: Path) -> list[Measurement]:
    rows = []
    for path in sorted(folder.glob("summary_power_*.csv")):
        gpu = path.stem.rsplit("_", 1)[-1]
        with path.open() as handle:
            for r in csv.DictReader(handle):
                rows.append(Measurement((gpu, r["dataset"], r["network"], r["batch_size"], r["optimizer"]),
                                        float(r["power_limit"]), float(r["time_per_epoch"]),
                                        float(r["average_power"])))
    return rows


def mlenergy_points(folder: Path) -> tuple[list[ItlPoint], list[float]]:
    """Every LLM/MLLM configuration as an ITL point, and each one's draw per GPU over its GPU's limit."""
    points, draws = [], []
    for task in LLM_TASKS:
        configurations = json.loads((folder / f"{task}.json").read_text())["configurations"]
        for c in configurations:
            group = (task, c["model_id"], c["gpu_model"], str(c["num_gpus"]), str(c["tensor_parallel"]),
                     str(c.get("expert_parallel")), str(c.get("data_parallel")))
            points.append(ItlPoint(group, float(c["avg_batch_size"]), float(c["median_itl_ms"])))
            if c["gpu_model"] in TDP_W:
                draws.append(c["avg_power_watts"] / c["num_gpus"] / TDP_W[c["gpu_model"]])
    return points, draws


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--zeus", type=Path, help="folder of the Zeus summary_power_*.csv files")
    parser.add_argument("--mlenergy", type=Path, help="folder of the ML.ENERGY leaderboard task JSON files")
    args = parser.parse_args(argv)
    if args.zeus is None and args.mlenergy is None:
        parser.error("give --zeus, --mlenergy or both")
    if args.zeus is not None:
        rows = zeus_rows(args.zeus)
        curve = fit_curve(rows)
        error = fit_error(curve, rows)
        print(f"training curve from {len(rows)} Zeus rows (limit as a fraction of the uncapped draw):")
        print("  fractions    ", curve.fractions)
        print("  time_factor  ", curve.time_factor)
        print("  power_factor ", curve.power_factor)
        print(f"  energy error: median {error['median_pct']:.1f}%, p90 {error['p90_pct']:.1f}%")
    if args.mlenergy is not None:
        points, draws = mlenergy_points(args.mlenergy)
        fit = fit_clock_bound_share(points)
        quartiles = statistics.quantiles(draws, n=4, method="inclusive")
        print(f"inference: {fit['configurations']:.0f} configurations in {fit['groups']:.0f} groups fit")
        print(f"  clock-bound share: median {fit['share']:.3f} (quartiles {fit['q1']:.3f}, {fit['q3']:.3f})")
        print(f"  draw per GPU / its default limit: quartiles {', '.join(f'{q:.2f}' for q in quartiles)}")
        print("  limit curve (shipped share):", INFERENCE_LIMIT_CURVE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
