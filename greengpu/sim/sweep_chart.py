"""The chart of a Pareto sweep (greengpu/sim/pareto.py): one row per scenario, energy against p95 wait on the
left and against p99 wait on the right; every grid point grey, the frontier's points blue, the marked point (the
shipped default) a red star. A PNG with no date in its metadata. Needs matplotlib (the plan extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from greengpu.errors import BadInput
from greengpu.sim.pareto import Point, frontier

Panel = tuple[str, Sequence[Point], str | None]
"""A row of the chart: its title, its points and the label of the marked point (or None)."""


def check_chart_path(path: Path) -> None:
    """One line (flag, path, why) before any replay runs, when the chart could not be written there."""
    if path.suffix.lower() != ".png":
        raise BadInput(f"--plot: {path} must name a .png file")
    if path.is_dir() or not path.parent.is_dir():
        raise BadInput(f"--plot: cannot write a chart at {path} (its folder does not exist)")


def _wait(point: Point, name: str) -> float:
    return point.p95_s if name == "p95" else point.p99_s


def write_chart(panels: Sequence[Panel], path: Path) -> None:
    """Draw the panels into a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_chart_path(path)
    rows = max(1, len(panels))
    figure, axes = plt.subplots(rows, 2, figsize=(10.0, 3.4 * rows), squeeze=False)
    for row, (title, points, mark) in enumerate(panels):
        edge = {p.label for p in frontier(points)}
        for column, name in enumerate(("p95", "p99")):
            ax = axes[row][column]
            rest = [p for p in points if p.label not in edge]
            best = sorted((p for p in points if p.label in edge), key=lambda p: p.energy_kwh)
            ax.scatter([p.energy_kwh for p in rest], [_wait(p, name) for p in rest], s=14, color="#999999",
                       label="grid point")
            ax.scatter([p.energy_kwh for p in best], [_wait(p, name) for p in best], s=22, color="#1f6fb4",
                       label="frontier (energy, p95, p99)")
            marked = [p for p in points if p.label == mark]
            if marked:
                ax.scatter([marked[0].energy_kwh], [_wait(marked[0], name)], s=120, marker="*", color="#cc0000",
                           label=str(mark), zorder=3)
            ax.set_title(f"{title}: energy against {name} wait", fontsize=9)
            ax.set_xlabel("facility energy (kWh)")
            ax.set_ylabel(f"{name} wait (s)")
            ax.grid(alpha=0.3)
            if row == 0 and column == 0:
                ax.legend(fontsize=7, frameon=False)
    figure.tight_layout()
    try:
        figure.savefig(path, format="png", dpi=110, metadata={"Software": None})
    except OSError as error:
        raise BadInput(f"--plot: cannot write {path}: {error.strerror or error}") from None
    finally:
        plt.close(figure)
