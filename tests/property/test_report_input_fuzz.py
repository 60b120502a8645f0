"""`greengpu report`'s own inputs, fuzzed through the command line's exit path as every reader is
(tests/property/test_input_fuzz.py): the report settings (YAML), the OpenEI tariff document (JSON), the
hourly price CSV and the flags. Any input gives exit 0, or one line on stderr and exit 2; never a
traceback, never a NaN in the JSON, and the ledger is never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import public_data
from documents import key_paths
from hypothesis import given
from hypothesis import strategies as st
from test_input_fuzz import (  # the house helpers: one exit path, one set of odd values
    CLUSTER,
    ODD_VALUES,
    TRACES,
    YAML_SCALARS,
    _csv_ops,
    _replace,
    assert_clean,
    fuzz,
    mutate_csv,
    run_cli,
    workdir,  # noqa: F401  (a fixture)
    write_mutated,
)

SETTINGS = {
    "currency": "EUR", "country_iso_code": "DEU", "region": "Hessen", "pue": 1.3, "pue_source": "metered",
    "tariff": {"openei": "rate.json", "timezone": "America/New_York", "holidays": ["2024-01-01"]},
    "carbon": {"location": {"flat_g_per_kwh": 380, "source": "grid"},
               "market": {"residual_mix_g_per_kwh": 520, "source": "residual",
                          "contracts": [{"name": "ppa", "g_per_kwh": 0, "share": 0.4}],
                          "certificates_kwh_per_month": 10},
               "cloud": {"regions": {"us-east-1": 380, "eu-west-1": 250}, "source": "regional averages"}},
    "embodied": {"kg_per_gpu": 1500, "lifetime_years": 5, "source": "vendor"},
    "chargeback": {"per_gpu_hour": {"A100": 2.10, "default": 1.50}, "per_instance": {"1g.5gb": 0.35}},
}
CHARGEBACK = {"chargeback": SETTINGS["chargeback"]}
HOURLY = {"tariff": {"hourly_csv": "prices.csv", "source": "market"}}


@pytest.fixture(scope="module")
def billed(workdir: Path) -> tuple[Path, str]:  # noqa: F811
    """A real ledger from `greengpu simulate --ledger`, the month it covers, and the files settings name."""
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "trace.csv").write_text(TRACES["csv"][0], encoding="utf-8")
    ledger = workdir / "billed.db"
    code, out, err = run_cli("-q", "simulate", "--trace", str(workdir / "trace.csv"), "--cluster",
                             str(workdir / "cluster.yaml"), "--policy", "always-on", "--policy", "default",
                             "--ledger", str(ledger), "--json")
    assert code == 0, err
    import sqlite3

    with sqlite3.connect(f"{ledger.resolve().as_uri()}?mode=ro", uri=True) as db:
        (first,) = db.execute("SELECT MIN(hour_start_s) FROM node_hours").fetchone()
    import datetime as dt

    month = dt.datetime.fromtimestamp(first, dt.UTC).strftime("%Y-%m")
    (workdir / "rate.json").write_text(public_data("openei-urdb/openei_urdb_virginia.json").read_text())
    hours = range(int(first) - 86400 * 40, int(first) + 86400 * 40, 3600)
    (workdir / "prices.csv").write_text("time,price_per_kwh\n" + "".join(f"{h},0.{h % 97:02d}\n" for h in hours))
    return ledger, month


def report(ledger: Path, month: str, *extra: str) -> tuple[int, str, str]:
    before = ledger.read_bytes()
    code, out, err = run_cli("report", "--ledger", str(ledger), "--month", month, "--run", "2", "--json", *extra)
    assert ledger.read_bytes() == before, "report wrote to its input"
    return code, out, err


def test_the_valid_settings_bill_the_month(workdir: Path, billed: tuple[Path, str]) -> None:  # noqa: F811
    ledger, month = billed
    (workdir / "report.yaml").write_text(yaml.safe_dump(SETTINGS))
    code, out, err = report(ledger, month, "--settings", str(workdir / "report.yaml"), "--baseline", "1")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["pricing"]["tariff"]["kind"] == "time-of-use" and payload["totals"]["co2_market_kg"] is not None


@fuzz(60)
@given(data=st.data())
def test_report_settings_values(workdir: Path, billed: tuple[Path, str], data: st.DataObject) -> None:  # noqa: F811
    ledger, month = billed
    base = data.draw(st.sampled_from([SETTINGS, {**SETTINGS, **HOURLY}]), label="base")
    path = data.draw(st.sampled_from(key_paths(base)), label="path")
    document = _replace(base, path, data.draw(YAML_SCALARS, label="value"))
    target = workdir / "fuzzed-report.yaml"
    write_mutated(target, yaml.safe_dump(document, allow_unicode=True), data)
    code, out, err = report(ledger, month, "--settings", str(target))
    assert_clean(code, err, out=out)


@fuzz(60)
@given(data=st.data())
def test_chargeback_settings(workdir: Path, billed: tuple[Path, str], data: st.DataObject) -> None:  # noqa: F811
    """The `chargeback:` settings (issue 41): a value, a rate's name or a whole mapping replaced by anything gives
    a bill whose chargeback rows add up, or one located line and exit 2."""
    ledger, month = billed
    path = data.draw(st.sampled_from(key_paths(CHARGEBACK)), label="path")
    document = _replace(CHARGEBACK, path, data.draw(st.one_of(YAML_SCALARS, ODD_VALUES), label="value"))
    if data.draw(st.booleans(), label="rename"):  # a GPU model or profile named by anything
        name = data.draw(st.one_of(YAML_SCALARS, ODD_VALUES), label="name")
        given = document["chargeback"]
        rates = given.get("per_gpu_hour") if isinstance(given, dict) else None
        if isinstance(rates, dict) and rates:
            rates[name if isinstance(name, (str, int, float, bool)) or name is None else str(name)] = rates.pop(
                next(iter(rates)))
    target = workdir / "fuzzed-chargeback.yaml"
    write_mutated(target, yaml.safe_dump(document, allow_unicode=True), data)
    code, out, err = report(ledger, month, "--settings", str(target))
    assert_clean(code, err, out=out)
    if code == 0 and json.loads(out)["totals"]["chargeback"] is not None:
        payload = json.loads(out)
        total = payload["totals"]["chargeback"]
        assert round(sum(t["chargeback"] for t in payload["tenants"]) * 100) == round(total * 100)
    elif code == 0:  # `chargeback: null` is no chargeback, as any null key is absent
        assert document["chargeback"] is None
    else:
        assert "fuzzed-chargeback.yaml" in err or "--settings: chargeback" in err, err


@fuzz(60)
@given(data=st.data())
def test_openei_document_values(workdir: Path, billed: tuple[Path, str], data: st.DataObject) -> None:  # noqa: F811
    ledger, month = billed
    document = json.loads(public_data("openei-urdb/openei_urdb_virginia.json").read_text())
    paths = [p for p in key_paths(document) if p[:2] == ("items", 0) and len(p) > 2
             and p[2] in ("energyratestructure", "energyweekdayschedule", "energyweekendschedule",
                          "fixedchargefirstmeter", "fixedchargeunits")] + [("items",)]
    path = data.draw(st.sampled_from(paths), label="path")
    value = data.draw(st.one_of(YAML_SCALARS.filter(lambda v: not isinstance(v, float) or v == v), ODD_VALUES),
                      label="value")
    try:
        text = json.dumps(_replace(document, path, value))
    except (ValueError, OverflowError):
        text = json.dumps(document)[: data.draw(st.integers(0, 500), label="cut")]
    (workdir / "fuzzed-rate.json").write_text(text)
    settings = workdir / "openei-report.yaml"
    settings.write_text(yaml.safe_dump({"tariff": {"openei": "fuzzed-rate.json", "timezone": "America/New_York"}}))
    code, out, err = report(ledger, month, "--settings", str(settings))
    assert_clean(code, err, out=out)


@fuzz(60)
@given(data=st.data())
def test_hourly_price_csv(workdir: Path, billed: tuple[Path, str], data: st.DataObject) -> None:  # noqa: F811
    ledger, month = billed
    mutated = mutate_csv((workdir / "prices.csv").read_text(), ",", data.draw(_csv_ops(2), label="ops"))
    write_mutated(workdir / "fuzzed-prices.csv", mutated, data)
    settings = workdir / "hourly-report.yaml"
    settings.write_text(yaml.safe_dump({"tariff": {"hourly_csv": "fuzzed-prices.csv"}}))
    code, out, err = report(ledger, month, "--settings", str(settings))
    assert_clean(code, err, out=out)


@fuzz(40)
@given(month=st.one_of(st.sampled_from(["last", "2017-10", "9999-01", "2024-13", "", "1900-01"]), ODD_VALUES),
       baseline=st.one_of(st.sampled_from(["1", "2", "3", "0", "-1"]), ODD_VALUES),
       aggregate=st.sampled_from(["tenant", "node", "class", "job", "cluster", "rack"]),
       share=st.sampled_from(["none", "proportional", "even", "weighted"]),
       output=st.sampled_from(["json", "csv", "html", "text", "pdf"]),
       fleet=st.sampled_from([(), ("--fleet",), ("--run", "1"), ("--cluster-name", "cluster"),
                              ("--cluster-name", ""), ("--cluster-name", "٢")]))
def test_report_flags(workdir: Path, billed: tuple[Path, str], month: str, baseline: str, aggregate: str,  # noqa: F811
                      share: str, output: str, fleet: tuple[str, ...]) -> None:
    ledger, _ = billed
    before = ledger.read_bytes()
    code, out, err = run_cli("report", "--ledger", str(ledger), "--month", month, "--run", "2", "--baseline",
                             baseline, "--aggregate", aggregate, "--share-idle", share, "--format", output, *fleet)
    assert_clean(code, err, out=out if output == "json" else "")
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("aggregate", ["tenant", "node", "class", "job"])
@pytest.mark.parametrize("share", ["none", "even"])
def test_every_row_kind_and_idle_rule_renders_in_every_format(workdir: Path, billed: tuple[Path, str],  # noqa: F811
                                                             aggregate: str, share: str) -> None:
    ledger, month = billed
    # The HTML page of every row kind with an (idle) row (the default rule); text and CSV of every combination.
    for output in ("text", "csv", "html") if share == "none" else ("text", "csv"):
        code, out, err = run_cli("report", "--ledger", str(ledger), "--month", month, "--run", "2", "--baseline", "1",
                                 "--aggregate", aggregate, "--share-idle", share, "--format", output)
        assert code == 0, err
        assert "TOTAL" in out
        if output == "html":  # the page of a row kind with idle kept
            assert 'id="chart-rows"' in out and 'id="chart-savings"' in out


# ------------------------------------------------------------------ issue 38: months, empty settings, ledgers

UNICODE_DIGITS = st.sampled_from(["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９"])


@fuzz(40)
@given(data=st.data())
def test_a_month_in_any_digits_is_billed_only_in_ascii(workdir: Path, billed: tuple[Path, str],  # noqa: F811
                                                       data: st.DataObject) -> None:
    ledger, month = billed
    digits = [data.draw(UNICODE_DIGITS, label=f"script {i}") for i in range(6)]
    written = "".join(digits[i][int(c)] for i, c in enumerate(month[:4] + month[5:7])) if month.isascii() else month
    written = f"{written[:4]}-{written[4:]}"
    code, out, err = report(ledger, written)
    assert_clean(code, err, out=out)
    assert (code == 0) == written.isascii(), f"{written!r}: exit {code}"


@fuzz(30)
@given(text=st.one_of(st.sampled_from(["", "\n", "# nothing\n", "{}", "---\n", "~\n", "null\n", "...\n"]),
                      st.text(st.sampled_from(" \t\n#"), max_size=20)))
def test_a_settings_file_with_no_settings_is_refused(workdir: Path, billed: tuple[Path, str],  # noqa: F811
                                                     text: str) -> None:
    ledger, month = billed
    target = workdir / "empty-report.yaml"
    target.write_text(text, encoding="utf-8")
    code, out, err = report(ledger, month, "--settings", str(target))
    assert_clean(code, err, out=out)
    assert code == 2 and str(target) in err


NUMBER_COLUMNS = [("runs", "pue"), *[("tenant_hours", c) for c in ("hour_start_s", "gpu_hours", "gpu_energy_kwh",
                                                                    "energy_kwh", "cost", "co2_kg")],
                  *[("node_hours", c) for c in ("hour_start_s", "gpu_hours", "energy_kwh", "cost", "asleep_h")],
                  *[("job_runs", c) for c in ("start_s", "end_s", "gpus", "energy_kwh", "cost", "co2_kg")]]


@fuzz(60)
@given(data=st.data())
def test_odd_values_in_a_ledgers_number_columns(workdir: Path, billed: tuple[Path, str],  # noqa: F811
                                                data: st.DataObject) -> None:
    import contextlib
    import shutil
    import sqlite3

    source, month = billed
    ledger = workdir / "edited.db"
    shutil.copyfile(source, ledger)
    table, column = data.draw(st.sampled_from(NUMBER_COLUMNS), label="column")
    value = data.draw(st.one_of(st.sampled_from(["abc", "", "1,5", "١٢", "nan", b"\x00\xff"]), ODD_VALUES,
                                st.floats(allow_nan=False)), label="value")
    row = data.draw(st.integers(0, 10_000), label="row")  # drawn, so that CI's derandomized runs repeat
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        (count,), = db.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = 2").fetchall()
        db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid IN (SELECT rowid FROM {table} "
                   f"WHERE run_id = 2 ORDER BY rowid LIMIT 1 OFFSET ?)", (value, row % max(count, 1)))
        db.commit()
        (kind,) = db.execute(f"SELECT typeof({column}) FROM {table} WHERE run_id = 2 "
                             f"AND typeof({column}) NOT IN ('integer', 'real') LIMIT 1").fetchone() or ("real",)
    code, out, err = report(ledger, month)
    assert_clean(code, err, out=out)
    if kind != "real":  # text or a blob stored in a number column: refused, naming the column
        assert code == 2 and column in err, f"{table}.{column} = {value!r} ({kind}): exit {code} {err}"


def test_a_foreign_wal_database_is_left_as_found(workdir: Path) -> None:  # noqa: F811
    import contextlib
    import sqlite3

    folder = workdir / "foreign-wal"
    folder.mkdir()
    foreign = folder / "app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        db.commit()
    code, out, err = run_cli("report", "--ledger", str(foreign), "--month", "2024-01", "--json")
    assert_clean(code, err, out=out)
    assert code == 2 and [p.name for p in folder.iterdir()] == ["app.db"]


URI_PARTS = st.one_of(st.sampled_from(["", "x", "greengpu", "a b", "%", "%zz", "'", "\\", "@", ":", "/", "?", "#",
                                       "=", "&", "٢", "\x00", "ü", "-c", "9" * 70]), ODD_VALUES)


@fuzz(40)
@given(user=URI_PARTS, database=URI_PARTS, parameter=URI_PARTS, value=URI_PARTS,
       scheme=st.sampled_from(["postgresql", "postgres", "POSTGRESQL", "postgresql+psycopg"]))
def test_odd_postgresql_uris_are_one_line(workdir: Path, user: str, database: str, parameter: str,  # noqa: F811
                                          value: str, scheme: str) -> None:
    # A socket folder that does not exist: libpq fails at once, and nothing leaves this machine.
    uri = f"{scheme}://{user}@/{database}?host={workdir}/no-server&{parameter}={value}"
    code, out, err = run_cli("report", "--ledger", uri, "--month", "2024-01", "--json")
    assert_clean(code, err, out=out, allowed=(2,))
