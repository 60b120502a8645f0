"""Bad inventories and policies: each yields one clear line naming file, line and key, and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from greengpu.cli import main

VALID = """\
site:
  pue: 1.3
  price_per_kwh: 0.12
  carbon_g_per_kwh: 380
node_types:
  a100x8:
    gpus: 8
    gpu_model: A100
    gpu_idle_w: 55
    gpu_max_w: 400
    gpu_min_limit_w: 100
    host_idle_w: 450
    host_sleep_w: 8
    boot_s: 180
nodes:
  - name: gpu[001-004]
    type: a100x8
    domain: rack1
    mac: "aa:bb:cc:00:00:01"
  - name: gpu005
    type: a100x8
    domain: rack2
tenants:
  vision: {quota_gpus: 16, weight: 2}
  nlp:    {quota_gpus: 16, weight: 3, borrow_limit_gpus: 8}
"""


def run_check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *extra: str) -> tuple[int, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    code = main(["check", "--cluster", str(path), *extra])
    err = capsys.readouterr().err
    return code, err


def test_valid_inventory_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_check(tmp_path, capsys, VALID)
    assert code == 0, err


# (case name, transformed YAML, expected line number, expected key path, words in the message)
CASES: list[tuple[str, str, int | None, str, str]] = [
    ("bad yaml syntax", VALID.replace("  pue: 1.3", "  pue: [1.3"), None, "", "invalid YAML"),
    ("tab indentation", VALID.replace("    gpus: 8", "\tgpus: 8"), None, "", "invalid YAML"),
    ("unknown top key", VALID + "extra: 1\n", 26, "extra", "unknown key"),
    ("unknown node type key", VALID.replace("    boot_s: 180", "    boot_s: 180\n    gpu_wats: 3"), 15,
     "node_types.a100x8.gpu_wats", "unknown key"),
    ("wrong type", VALID.replace("    gpus: 8", "    gpus: eight"), 7, "node_types.a100x8.gpus", "whole number"),
    ("negative power", VALID.replace("gpu_idle_w: 55", "gpu_idle_w: -5"), 9, "node_types.a100x8.gpu_idle_w",
     "at least 0"),
    ("min limit above max", VALID.replace("gpu_min_limit_w: 100", "gpu_min_limit_w: 450"), 11,
     "node_types.a100x8.gpu_min_limit_w", "above gpu_max_w"),
    ("idle above max", VALID.replace("gpu_idle_w: 55", "gpu_idle_w: 500"), 9, "node_types.a100x8.gpu_idle_w",
     "above gpu_max_w"),
    ("duplicate node names", VALID.replace("name: gpu005", "name: gpu004"), 20, "nodes[1].name",
     "duplicate node name 'gpu004'"),
    ("bad hostlist", VALID.replace("gpu[001-004]", "gpu[001-"), 16, "nodes[0].name", "bad hostlist"),
    ("reversed hostlist range", VALID.replace("gpu[001-004]", "gpu[004-001]"), 16, "nodes[0].name", "hostlist"),
    ("bad MAC", VALID.replace('"aa:bb:cc:00:00:01"', '"aa:bb:cc:00:01"'), 19, "nodes[0].mac", "bad MAC"),
    ("MAC as sexagesimal number", VALID.replace('"aa:bb:cc:00:00:01"', "12:34:56"), 19, "nodes[0].mac", "quoted"),
    ("MAC range overflow", VALID.replace('"aa:bb:cc:00:00:01"', '"ff:ff:ff:ff:ff:fe"'), 19, "nodes[0].mac",
     "overflows"),
    ("multicast MAC", VALID.replace('"aa:bb:cc:00:00:01"', '"ab:bb:cc:00:00:01"'), 19, "nodes[0].mac", "multicast"),
    ("unknown node type", VALID.replace("    type: a100x8\n    domain: rack2", "    type: a100x4\n    domain: rack2"),
     21, "nodes[1].type", "unknown node type 'a100x4'"),
    ("quota negative", VALID.replace("quota_gpus: 16, weight: 2", "quota_gpus: -1, weight: 2"), 24,
     "tenants.vision.quota_gpus", "at least 0"),
    ("quota on unknown model", VALID.replace("vision: {quota_gpus: 16, weight: 2}",
                                             "vision: {quota_gpus_by_model: {H100: 8}}"), 24,
     "tenants.vision.quota_gpus_by_model.H100", "unknown GPU model 'H100'"),
    ("zero weight", VALID.replace("weight: 3", "weight: 0"), 25, "tenants.nlp.weight", "greater than 0"),
    ("unknown tenant key", VALID.replace("weight: 3,", "wieght: 3,"), 25, "tenants.nlp.wieght", "unknown key"),
    ("missing CSV file", VALID.replace("price_per_kwh: 0.12", "tariff_csv: prices.csv"), None, "", "file not found"),
    ("both flat and CSV tariff", VALID.replace("price_per_kwh: 0.12", "price_per_kwh: 0.12\n  tariff_csv: p.csv"),
     4, "site.tariff_csv", "either price_per_kwh or tariff_csv"),
    ("pue below one", VALID.replace("pue: 1.3", "pue: 0.9"), 2, "site.pue", "at least 1"),
    ("unknown time zone", VALID.replace("pue: 1.3", "pue: 1.3\n  timezone: Europe/Berlinn"), 3, "site.timezone",
     "unknown time zone 'Europe/Berlinn'"),
    ("offset as time zone", VALID.replace("pue: 1.3", "pue: 1.3\n  timezone: +02:00"), 3, "site.timezone",
     "IANA name"),
    ("time zone as a path", VALID.replace("pue: 1.3", "pue: 1.3\n  timezone: ../../etc/passwd"), 3, "site.timezone",
     "unknown time zone"),
    ("duplicate key", VALID.replace("    gpus: 8", "    gpus: 8\n    gpus: 4"), 8, "node_types.a100x8.gpus",
     "duplicate key"),
    ("missing nodes", VALID.split("nodes:")[0] + "tenants: {}\n", 1, "nodes", "missing required key"),
    ("empty nodes list", VALID.split("nodes:\n")[0] + "nodes: []\ntenants:" + VALID.split("tenants:")[1],
     15, "nodes", "at least one node"),
    ("not a mapping", "- just\n- a list\n", 1, "", "expected a mapping"),
    ("nan power", VALID.replace("gpu_max_w: 400", "gpu_max_w: .nan"), 10, "node_types.a100x8.gpu_max_w", "finite"),
    ("bool as number", VALID.replace("host_idle_w: 450", "host_idle_w: yes"), 12, "node_types.a100x8.host_idle_w",
     "expected a number"),
    ("pool of unknown type", VALID + "pools:\n  spot1: {type: h100, spot: true, price_per_hour: 3, max_nodes: 2}\n",
     27, "pools.spot1.type", "unknown node type 'h100'"),
    ("bad wol_host", VALID.replace("    domain: rack2", "    domain: rack2\n    wol_host: not-an-ip"), 23,
     "nodes[1].wol_host", "not an IP address"),
]


@pytest.mark.parametrize(("text", "line", "key", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_inventory_gives_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int | None, key: str, words: str
) -> None:
    code, err = run_check(tmp_path, capsys, text)
    assert code == 2
    assert err.count("\n") == 1, f"expected one line, got: {err!r}"
    assert "Traceback" not in err
    assert words in err
    where = str(tmp_path / "cluster.yaml")
    if words == "file not found":
        where = str(tmp_path / "prices.csv")
    assert where in err
    if line is not None:
        assert f"cluster.yaml:{line}:" in err, err
    if key:
        assert f" {key}:" in err, err


def test_bad_csv_row_names_csv_file_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "prices.csv").write_text("time,price_per_kwh\n2024-01-01T00:00:00,0.10\n2024-01-01T01:00:00,cheap\n")
    code, err = run_check(tmp_path, capsys, VALID.replace("price_per_kwh: 0.12", "tariff_csv: prices.csv"))
    assert code == 2
    assert f"{tmp_path / 'prices.csv'}:3: price_per_kwh: not a number: 'cheap'" in err


def test_csv_missing_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "carbon.csv").write_text("time,gco2\n2024-01-01T00:00:00,100\n")
    code, err = run_check(tmp_path, capsys, VALID.replace("carbon_g_per_kwh: 380", "carbon_csv: carbon.csv"))
    assert code == 2
    assert "carbon.csv:1: g_per_kwh: missing column" in err


def test_valid_csv_series_loads(tmp_path: Path) -> None:
    from greengpu.config.inventory import load_cluster

    (tmp_path / "prices.csv").write_text("time,price_per_kwh\n2024-01-01T00:00:00Z,0.10\n2024-01-01T01:00:00Z,-0.02\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(VALID.replace("price_per_kwh: 0.12", "tariff_csv: prices.csv"))
    cluster = load_cluster(path)
    assert cluster.site.tariff is not None
    assert cluster.site.tariff.value_at(1704067200 + 3599) == pytest.approx(0.10)
    assert cluster.site.tariff.value_at(1704067200 + 3600) == pytest.approx(-0.02)


POLICY_CASES = [
    ("unknown section", "capping:\n  enabled: true\nsleeep: {}\n", 3, "sleeep", "unknown key"),
    ("bad victim order", "scheduler:\n  preemption:\n    victim_order: oldest\n", 3,
     "scheduler.preemption.victim_order", "must be one of"),
    ("bad weekday", "sleep:\n  windows:\n    - {days: [mon, funday]}\n", 3, "sleep.windows[0].days[1]",
     "unknown weekday"),
    ("bad time of day", "sleep:\n  windows:\n    - {start: \"25:00\"}\n", 3, "sleep.windows[0].start", "time of day"),
    ("fixed without watts", "capping:\n  classes:\n    batch: {mode: fixed}\n", 3, "capping.classes.batch.limit_w",
     "needs limit_w"),
    ("unknown class", "capping:\n  classes:\n    gaming: {mode: fixed, limit_w: 100}\n", 3, "capping.classes.gaming",
     "unknown key"),
    ("negative grace", "scheduler:\n  preemption:\n    grace_s: -1\n", 3, "scheduler.preemption.grace_s", "at least 0"),
]


@pytest.mark.parametrize(("text", "line", "key", "words"), [c[1:] for c in POLICY_CASES],
                         ids=[c[0] for c in POLICY_CASES])
def test_bad_policy_gives_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int, key: str, words: str
) -> None:
    policy = tmp_path / "mine.yaml"
    policy.write_text(text)
    code, err = run_check(tmp_path, capsys, VALID, "--policy", str(policy))
    assert code == 2
    assert err.count("\n") == 1
    assert f"mine.yaml:{line}: {key}: " in err, err
    assert words in err


def test_unknown_policy_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_check(tmp_path, capsys, VALID, "--policy", "greenest")
    assert code == 2
    assert "greenest: no such policy file, and not a built-in policy (always-on, idle-timeout, default)" in err


def test_missing_option_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Missing option '--cluster'" in err


def test_a_key_with_a_newline_is_quoted_so_the_error_stays_on_one_line() -> None:
    """Found by the structural fuzz (tests/property/test_config_fuzz.py): `site: {"\\n": 0}`."""
    from greengpu.config.inventory import load_cluster_text
    from greengpu.errors import BadInput

    with pytest.raises(BadInput) as raised:
        load_cluster_text('site: {"\\n": 0}\nnode_types: {}\nnodes: []\n', "fuzz.yaml")
    assert str(raised.value).startswith("fuzz.yaml:1: site.'\\n': unknown key (allowed: ")
    assert "\n" not in str(raised.value)
