"""`greengpu plan --html`: a real headless Chromium renders the page and its charts; two runs with the
same input write byte-identical files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Colours only the charts use (greengpu/report/plan_html.py COLOURS): the 80% band and the required line.
BAND_80_RGB = (0x9F, 0xC5, 0xE8)
REQUIRED_RGB = (0xCC, 0x00, 0x00)
SAVED_BAR_RGB = (0x38, 0x76, 0x1D)


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("headless Chromium is missing in CI (.ci/run installs the chromium package)")
    pytest.skip("no headless Chromium here (apt-get install chromium)")


def three_week_trace(path: Path) -> None:
    """A lab's three weeks: one-GPU jobs by day, few at night, so demand has a daily shape."""
    rng = np.random.default_rng(7)
    rows = []
    start = pd.Timestamp("2026-03-02T00:00:00Z")
    for hour in range(21 * 24):
        busy_hours = 8 <= hour % 24 < 20 and (hour // 24) % 7 < 5
        for k in range(rng.poisson(1.5 if busy_hours else 0.2)):
            submit = start + pd.Timedelta(hours=hour, minutes=int(rng.integers(0, 60)))
            rows.append({"job_id": f"j{hour}-{k}", "submit_time": submit.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "duration_s": int(rng.integers(1800, 4 * 3600)), "gpus": 1, "tenant": "postdocs",
                         "priority": 0, "class": "training", "checkpoint_interval_s": ""})
    pd.DataFrame(rows).to_csv(path, index=False)


def plan_html(repo: Path, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "greengpu", "plan", "--trace", str(tmp_path / "trace.csv"), "--cluster",
         str(repo / "examples" / "lab-a100.cluster.yaml"), "--models", "baselines", "--settings",
         str(tmp_path / "plan.yaml"), "--html", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert f"HTML report: {out}" in done.stdout
    assert "Data: a synthetic three-week lab trace (greengpu's tests)" in done.stdout  # `credit:` of the settings
    return out


def has_colour(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    target = np.array(rgb, dtype=float) / 255.0
    close = np.all(np.abs(pixels[:, :, :3] - target) <= tolerance / 255.0, axis=2)
    return int(close.sum())


def test_html_report_renders_in_headless_chromium_and_is_byte_identical(repo: Path, tmp_path: Path) -> None:
    browser = chromium()
    three_week_trace(tmp_path / "trace.csv")
    (tmp_path / "plan.yaml").write_text(
        "horizon: 60d\nlead_time: 4w\nbuffer_factor: 1.2\ncredit: a synthetic three-week lab trace (greengpu's tests)\n"
        "projects:\n  - {name: vision pilot, gpus: 2, start: 2026-04-15}\n"
        "efficiency:\n  - {name: mixed precision, change: -10%, start: 2026-04-01}\n")
    first = plan_html(repo, tmp_path, "plan-1.html")
    second = plan_html(repo, tmp_path, "plan-2.html")
    assert first.read_bytes() == second.read_bytes()

    html = first.read_text()
    # Self-contained: no scripts, no stylesheet links, nothing fetched (XML namespace names are not fetched).
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html)
    assert not re.search(r"url\(\s*['\"]?(https?:|//|file:)", html)
    for text in ("vision pilot", "mixed precision", "-10%", "x 1.2 on the upper peak", "Scenarios", "postdocs",
                 "(idle)", "Long horizon:", "Data: a synthetic three-week lab trace (greengpu&#39;s tests)"):
        assert text in html

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,3000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", first.as_uri()], capture_output=True, text=True,
                         timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for figure_id in ("chart-demand", "chart-capacity", "chart-savings", "chart-origins"):
        start = dom.stdout.index(f'id="{figure_id}"')
        assert "<svg" in dom.stdout[start:start + 400], f"{figure_id} has no SVG in the rendered DOM"
    for table_id in ("models", "inputs", "months", "scenarios", "savings", "tenants"):
        assert f'id="{table_id}"' in dom.stdout

    screenshot = tmp_path / "plan.png"
    shot = subprocess.run([browser, *flags, f"--screenshot={screenshot}", first.as_uri()], capture_output=True,
                          text=True, timeout=120, check=False)
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(screenshot))
    assert pixels.shape[0] == 3000 and pixels.shape[1] == 1200
    # The charts were drawn by the browser: their colours cover real areas of the screenshot.
    assert has_colour(pixels, BAND_80_RGB) > 500, "the demand chart's 80% band is not on the page"
    assert has_colour(pixels, REQUIRED_RGB) > 200, "the capacity chart's required-GPUs line is not on the page"
    assert has_colour(pixels, SAVED_BAR_RGB) > 500, "the savings chart's bars are not on the page"
