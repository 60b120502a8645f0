"""Ledger schema 3 (issues 36 and 41): cloud rows in the bill, measured or modelled node-hours, chargeback per
GPU-hour, queue rows, and a savings headline that counts the cloud. SQLite here; PostgreSQL's migration is in
tests/integration/test_fleet_ledger_pg.py."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path

import pytest
import yaml
from fleet_inputs import report_json, run_cli
from spot_traces import training_overflow

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.ledger_schema import SCHEMA_VERSION, statements
from greengpu.accounting.ledger_sqlite import schema_version
from greengpu.accounting.ledger_v3 import basis_label
from greengpu.accounting.ledger_write import append_usage, open_metered_run, write_run
from greengpu.accounting.meter import EnergyMeter
from greengpu.model import Site

REPO = Path(__file__).resolve().parents[3]
FIRST = dt.datetime(2024, 3, 4, tzinfo=dt.UTC)
MONTH = "2024-03"
MONEY = ("cost", "cloud_cost", "total_cost", "chargeback")


def _cents(value: float) -> int:
    return round(value * 100)


def _grams(value: float) -> int:
    return round(value * 1000)


def assert_adds_up(payload: dict) -> None:
    """Rows plus idle are the totals, to a cent and a gram, for every figure the contract names."""
    for key in ("cost", "cloud_cost", "total_cost", "co2_kg", "cloud_co2_kg", "chargeback"):
        total = payload["totals"][key]
        if total is None:
            continue
        parts = [r[key] for r in payload["tenants"]] + [payload["idle"][key] or 0.0]
        convert = _cents if key in MONEY else _grams
        assert sum(convert(p) for p in parts) == convert(total), key


@pytest.fixture(scope="module")
def cloud_ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A one-day replay of examples/burst-cloud (two cloud pools) whose peak overflows into the cloud."""
    folder = tmp_path_factory.mktemp("cloud")
    rows = ["job_id,submit_time,duration_s,gpus,tenant,class"]
    for job in training_overflow(seed=0, days=1.0, jobs_per_hour=4.0):
        at = FIRST + dt.timedelta(seconds=job.submit_time_s)
        rows.append(f"{job.job_id},{at.isoformat()},{int(job.duration_s)},{int(job.gpus)},{job.tenant},training")
    trace = folder / "burst.trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    ledger = folder / "ledger.db"
    code, out, err = run_cli("-q", "simulate", "--trace", str(trace), "--cluster",
                             str(REPO / "examples" / "burst-cloud.cluster.yaml"), "--policy", "always-on",
                             "--policy", "default", "--ledger", str(ledger), "--json")
    assert code == 0, err
    import json

    return ledger, json.loads(out)


def test_a_replay_with_cloud_pools_bills_cloud_spend_per_tenant_and_adds_up(cloud_ledger: tuple[Path, dict]) -> None:
    ledger, replay = cloud_ledger
    for run, result in zip((1, 2), replay["results"], strict=True):
        payload = report_json("--ledger", str(ledger), "--month", MONTH, "--run", str(run))
        assert result["cloud_cost"] > 0, "the trace must overflow into the cloud"
        # The ledger's cloud spend is the replay's, to the cent.
        assert payload["totals"]["cloud_cost"] == pytest.approx(result["cloud_cost"], abs=0.011)
        assert payload["totals"]["total_cost"] == pytest.approx(payload["totals"]["cost"]
                                                                + payload["totals"]["cloud_cost"], abs=0.001)
        assert payload["totals"]["cloud_co2_kg"] > 0
        tenants = {t["tenant"]: t for t in payload["tenants"]}
        assert tenants["research"]["cloud_cost"] > 0
        assert_adds_up(payload)
        assert payload["basis"] == "modelled"
        assert all(t["basis"] == "modelled" for t in payload["tenants"])
        # The queue rows count every job that started, in the cloud too (a cloud job waited for capacity).
        queue = payload["queue"]["total"]
        assert queue["jobs_started"] == result["jobs"] - result["jobs_not_started"]
        assert queue["jobs_ended"] == result["jobs_completed"] and queue["failure_rate"] == 0.0
        assert queue["wait_p95_s"] >= queue["wait_p50_s"] >= 0


def test_every_format_carries_the_cloud_columns_and_the_basis(cloud_ledger: tuple[Path, dict]) -> None:
    ledger, _ = cloud_ledger
    code, csv_text, err = run_cli("report", "--ledger", str(ledger), "--month", MONTH, "--run", "2", "--format", "csv")
    assert code == 0, err
    head = csv_text.splitlines()[0].split(",")
    for column in ("cloud_cost", "cloud_co2_kg", "total_cost", "chargeback", "basis", "wait_p50_s"):
        assert column in head
    total = next(line.split(",") for line in csv_text.splitlines() if line.split(",")[1] == "TOTAL")
    assert float(total[head.index("cloud_cost")]) > 0
    code, text, err = run_cli("report", "--ledger", str(ledger), "--month", MONTH, "--run", "2")
    assert code == 0 and "cloud USD" in text and "total USD" in text and "queue" in text, err
    code, html, err = run_cli("report", "--ledger", str(ledger), "--month", MONTH, "--run", "2", "--format", "html")
    assert code == 0 and "cloud CO2 kg" in html and 'id="queue"' in html, err


def test_the_baseline_headline_shows_a_rise_in_total_cost(tmp_path: Path) -> None:
    """Two runs of one ledger: the second saves energy but rents a cloud node; its total cost rose, and the
    headline says so instead of a saving."""
    path = tmp_path / "ledger.db"
    site = Site(pue=1.0, price_per_kwh=0.5, carbon_g_per_kwh=100)
    start_s = FIRST.timestamp()
    from greengpu.accounting.cloud_rows import CloudUsage

    for draw_w, cloud in ((2000.0, {}), (1000.0, {(start_s, "aws", "a"): CloudUsage("us-east-1", 1.0, 1.0, 30.0,
                                                                                      0.4)})):
        attribution = Attribution(EnergyMeter(site))
        attribution.node_draw("n1", 2, start_s, start_s + 3600, draw_w, 0.0, False)
        write_run(path, attribution, kind="simulate", policy=f"p{int(draw_w)}", source="t", cloud=cloud)
    payload = report_json("--ledger", str(path), "--month", MONTH, "--run", "2", "--baseline", "1")
    saved = payload["baseline"]["totals"]
    assert saved["cost"] == 0.5 and saved["cloud_cost"] == -30.0 and saved["total_cost"] == -29.5
    assert "ROSE by 29.50" in payload["baseline"]["headline"]
    code, text, err = run_cli("report", "--ledger", str(path), "--month", MONTH, "--run", "2", "--baseline", "1")
    assert code == 0 and "ROSE by 29.50 USD" in text, err


def test_measured_only_where_counters_were_read(tmp_path: Path) -> None:
    """The daemon's rows are modelled unless measured energy is given for the node and the whole hour."""
    path = tmp_path / "ledger.db"
    site = Site(pue=1.0, price_per_kwh=0.2, carbon_g_per_kwh=100)
    run_id = open_metered_run(path, site, policy="p", source="s")
    start_s = FIRST.timestamp()
    attribution = Attribution(EnergyMeter(site))
    attribution.node_draw("n1", 1, start_s, start_s + 600, 300.0, 0.0, False, measured=True)
    attribution.node_draw("n2", 1, start_s, start_s + 600, 100.0, 0.0, False)
    append_usage(path, run_id, attribution, start_s=start_s, end_s=start_s + 600)
    payload = report_json("--ledger", str(path), "--month", MONTH)
    assert payload["basis"] == "partly measured (75%)" and payload["measured_share"] == 0.75
    # A later modelled period of n1's hour makes the whole hour modelled.
    later = Attribution(EnergyMeter(site))
    later.node_draw("n1", 1, start_s + 600, start_s + 1200, 300.0, 0.0, False)
    append_usage(path, run_id, later, start_s=start_s + 600, end_s=start_s + 1200)
    assert report_json("--ledger", str(path), "--month", MONTH)["basis"] == "modelled"
    assert basis_label(1.0) == "measured" and basis_label(None) == "modelled"
    assert basis_label(0.999) == "partly measured (99%)" and basis_label(0.001) == "partly measured (1%)"


def test_chargeback_bills_gpu_hours_by_model_and_mig_profile_and_adds_up(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    site = Site(pue=1.0, price_per_kwh=0.2, carbon_g_per_kwh=100)
    start_s = FIRST.timestamp()
    attribution = Attribution(EnergyMeter(site))
    attribution.node_draw("n1", 4, start_s, start_s + 7200, 800.0, 0.0, False)
    from dataclasses import replace

    from greengpu.model import Job

    for job, model, profile, units in (("j1", "A100-SXM4-40GB", "", 2000), ("j2", "V100", "", 1000),
                                       ("j3", "A100-SXM4-40GB", "1g.5gb", 1000)):
        charge = attribution.job_ran(Job(job, "a" if job != "j2" else "b", units / 1000, 7200.0), {"n1": units},
                                     start_s, start_s + 7200, {"n1": 200.0}, {"n1": 0.0}, {"n1": 4})
        attribution.jobs[-1] = replace(charge, gpu_model=model, gpu_profile=profile, outcome="completed")
    write_run(path, attribution, kind="simulate", policy="p", source="t")
    settings = tmp_path / "report.yaml"
    settings.write_text(yaml.safe_dump({"chargeback": {"per_gpu_hour": {"A100-SXM4-40GB": 2.10, "default": 1.50},
                                                       "per_instance": {"1g.5gb": 0.35}}}))
    payload = report_json("--ledger", str(path), "--month", MONTH, "--settings", str(settings))
    tenants = {t["tenant"]: t for t in payload["tenants"]}
    assert tenants["a"]["chargeback"] == round(2 * 2 * 2.10 + 2 * 0.35, 2)  # 4 A100 GPU-h, 2 instance-hours
    assert tenants["b"]["chargeback"] == 2 * 1 * 1.50  # V100: the default rate
    assert payload["idle"]["chargeback"] == 0.0
    assert_adds_up(payload)
    settings.write_text(yaml.safe_dump({"chargeback": {"per_gpu_hour": {"A100-SXM4-40GB": 2.10}}}))
    code, _, err = run_cli("report", "--ledger", str(path), "--month", MONTH, "--settings", str(settings), "--json")
    assert code == 2 and "no rate for GPU model 'V100'" in err and len(err.strip().splitlines()) == 1
    settings.write_text("chargeback:\n  per_gpu_hour:\n    default: -1\n")
    code, _, err = run_cli("report", "--ledger", str(path), "--month", MONTH, "--settings", str(settings), "--json")
    assert code == 2 and "report.yaml" in err and "default" in err and len(err.strip().splitlines()) == 1


def test_queue_rows_from_submit_times_and_outcomes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    site = Site(pue=1.0, price_per_kwh=0.2, carbon_g_per_kwh=100)
    start_s = FIRST.timestamp()
    attribution = Attribution(EnergyMeter(site))
    attribution.node_draw("n1", 8, start_s, start_s + 7200, 800.0, 0.0, False)
    from dataclasses import replace

    from greengpu.model import Job

    for index, (wait_s, outcome) in enumerate(((0, "completed"), (60, "failed"), (600, "completed"),
                                               (3600, "killed"))):
        job = Job(f"j{index}", "a", 1.0, 600.0, submit_time_s=start_s - wait_s)
        charge = attribution.job_ran(job, {"n1": 1000}, start_s, start_s + 600, {"n1": 100.0}, {"n1": 0.0},
                                     {"n1": 8})
        attribution.jobs[-1] = replace(charge, outcome=outcome, checkpoint_s=30.0 * (index + 1))
    write_run(path, attribution, kind="simulate", policy="p", source="t")
    queue = report_json("--ledger", str(path), "--month", MONTH)["queue"]
    total = queue["total"]
    assert total["jobs_started"] == 4 and total["wait_p50_s"] == 60 and total["wait_p95_s"] == 3600
    assert total["failure_rate"] == 0.5 and total["checkpoint_mean_s"] == 75.0
    assert [q["tenant"] for q in queue["tenants"]] == ["a"]


def test_a_version_2_ledger_is_read_as_it_is_and_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        for version in (1, 2):
            for statement in statements(version, "sqlite"):
                db.execute(statement)
        db.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        db.execute("INSERT INTO runs VALUES (1, 'daemon', 'default', 't', '2024-03-01', 'USD', 1.2, 'east')")
        db.execute("INSERT INTO node_hours VALUES (1, ?, 'n1', 2, 1, 2, 0.5, 0.7, 0)", (FIRST.timestamp(),))
        db.execute("INSERT INTO tenant_hours VALUES (1, ?, 'a', 1, 0.5, 1, 0.25, 0.3)", (FIRST.timestamp(),))
        db.execute("INSERT INTO job_runs VALUES (1, 'j1', 'a', 'training', ?, ?, 1, 'n1', 0.5, 1, 0.25, 0.3)",
                   (FIRST.timestamp(), FIRST.timestamp() + 3600))
        db.commit()
    before = path.read_bytes()
    payload = report_json("--ledger", str(path), "--month", MONTH)
    assert path.read_bytes() == before and schema_version(path) == 2  # a reader never migrates
    # A daemon's run before schema 3 was never checked against counters: modelled, not 'measured'.
    assert payload["basis"] == "modelled" and payload["totals"]["cloud_cost"] == 0.0
    assert payload["idle"]["cloud_co2_kg"] == 0.0 and payload["tenants"][0]["cloud_cost"] == 0.0
    open_metered_run(path, Site(), policy="p", source="s", cluster="east")
    assert schema_version(path) == SCHEMA_VERSION == 3
    again = report_json("--ledger", str(path), "--month", MONTH, "--run", "1")
    assert again["totals"]["cost"] == payload["totals"]["cost"] == 0.5
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT basis, outcome FROM node_hours, job_runs").fetchall() == [("modelled", "")]


def test_recording_the_cloud_for_the_ledger_changes_no_decision(cloud_ledger: tuple[Path, dict],
                                                                tmp_path: Path) -> None:
    """The same replay without --ledger: every figure the same (the cloud pools that record spans decide alike)."""
    import json

    ledger, with_ledger = cloud_ledger
    trace = ledger.parent / "burst.trace.csv"
    code, out, err = run_cli("-q", "simulate", "--trace", str(trace), "--cluster",
                             str(REPO / "examples" / "burst-cloud.cluster.yaml"), "--policy", "always-on",
                             "--policy", "default", "--json")
    assert code == 0, err
    without = json.loads(out)["results"]
    for mine, theirs in zip(with_ledger["results"], without, strict=True):
        clock = ("ledger_run_id", "sim_wall_s")  # the run written, and the wall time the replay took
        assert {k: v for k, v in mine.items() if k not in clock} == {k: v for k, v in theirs.items()
                                                                     if k not in clock}


def test_cloud_co2_at_the_regions_intensity_where_the_settings_know_it(cloud_ledger: tuple[Path, dict],
                                                                        tmp_path: Path) -> None:
    ledger, _ = cloud_ledger
    plain = report_json("--ledger", str(ledger), "--month", MONTH, "--run", "2")
    # The replay knew no series for us-east-1: charged at the site's 380 g/kWh, and the report says so.
    assert plain["pricing"]["carbon_cloud"]["at_site_intensity"] == ["us-east-1"]
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        (energy,), = db.execute("SELECT SUM(energy_kwh) FROM cloud_hours WHERE run_id = 2").fetchall()
    assert plain["totals"]["cloud_co2_kg"] == pytest.approx(energy * 0.380, abs=0.002)
    settings = tmp_path / "report.yaml"
    settings.write_text(yaml.safe_dump({"carbon": {"cloud": {"regions": {"us-east-1": 190},
                                                             "source": "example regional average"}}}))
    regional = report_json("--ledger", str(ledger), "--month", MONTH, "--run", "2", "--settings", str(settings))
    assert regional["pricing"]["carbon_cloud"]["at_site_intensity"] == []
    assert regional["totals"]["cloud_co2_kg"] == pytest.approx(energy * 0.190, abs=0.002)
    assert regional["totals"]["cloud_cost"] == plain["totals"]["cloud_cost"]
    assert_adds_up(regional)
