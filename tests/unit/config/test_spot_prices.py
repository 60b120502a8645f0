"""Cloud prices from a SkyPilot-shaped catalog CSV: per node-hour and per GPU-hour, the pool's price in the
inventory, and every mistake as one located line (file, line, column or key) with exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cloud_pools, load_cluster
from greengpu.config.prices import read_price_csv
from greengpu.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
EXCERPT = REPO / "examples" / "cloud-prices" / "aws-gpu-prices-excerpt.csv"

RUNPOD_ROWS = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,SpotPrice,Price,AvailabilityZone
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,80.0,A100-80GB,CA,1.19,1.64,CA-MTL-1
8x_A100-80GB_SECURE,A100-80GB,8.0,64.0,640.0,A100-80GB,CA,9.52,13.12,CA-MTL-1
1x_A100-80GB-SXM_SECURE,A100-80GB-SXM,1.0,16.0,125.0,A100-80GB-SXM,CA,,1.89,CA-MTL-1
"""
"""Rows of SkyPilot's RunPod catalog (columns in its own order; the SXM type has no spot quote)."""


def test_the_shipped_excerpt_prices_a_region_at_its_dearest_zone_and_a_zone_exactly() -> None:
    table = read_price_csv(EXCERPT, "prices.csv")
    region = table.pool_prices("p4d.24xlarge", "us-east-1")
    assert region.gpus_per_node == 8
    assert region.on_demand_per_node_hour == pytest.approx(32.7726)
    assert region.on_demand_per_gpu_hour == pytest.approx(32.7726 / 8)
    assert region.spot_per_node_hour == pytest.approx(9.8722)  # use1-az2, the dearest of az1, az2, az6
    assert region.spot_per_gpu_hour == pytest.approx(9.8722 / 8)
    zone = table.pool_prices("p4d.24xlarge", "us-east-1", "use1-az6")
    assert zone.spot_per_node_hour == pytest.approx(6.8179)
    assert zone.lines == (7,)
    # ap-south-1 quotes no spot price; p4de's zones list a row without spot beside one with it.
    assert table.pool_prices("p4d.24xlarge", "ap-south-1").spot_per_node_hour is None
    assert table.pool_prices("p4de.24xlarge", "us-east-1", "use1-az4").spot_per_node_hour == pytest.approx(5.8171)
    assert table.pool_prices("g6.2xlarge").on_demand_per_gpu_hour == pytest.approx(0.9776)


def test_columns_in_another_order_and_instances_without_a_spot_quote(tmp_path: Path) -> None:
    path = tmp_path / "runpod.csv"
    path.write_text(RUNPOD_ROWS)
    table = read_price_csv(path, str(path))
    eight = table.pool_prices("8x_A100-80GB_SECURE", "CA")
    assert (eight.on_demand_per_gpu_hour, eight.spot_per_gpu_hour) == (pytest.approx(1.64), pytest.approx(1.19))
    assert table.pool_prices("1x_A100-80GB-SXM_SECURE").spot_per_node_hour is None


INVENTORY = """\
site: {pue: 1.2, price_per_kwh: 0.1}
node_types:
  a100x8: {gpus: 8, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, host_idle_w: 450}
  l4x1: {gpus: 1, gpu_model: L4, gpu_idle_w: 16, gpu_max_w: 72, host_idle_w: 90}
nodes:
  - {name: "gpu[1-2]", type: a100x8}
pools:
  burst:
    type: a100x8
    spot: true
    price_csv: prices.csv
    instance_type: p4d.24xlarge
    region: us-east-1
    zone: use1-az1
    interruptions_per_hour: 0.1
    max_nodes: 2
    node_names: "burst[1-2]"
    launch_command: /opt/launch --name {node} --type '{instance_type}' --zone {zone}
"""


def _inventory(tmp_path: Path, text: str = INVENTORY) -> Path:
    shutil.copy(EXCERPT, tmp_path / "prices.csv")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_an_inventory_pool_takes_its_price_from_the_csv(tmp_path: Path) -> None:
    path = _inventory(tmp_path)
    pool = load_cluster(path).pools["burst"]
    assert pool.price_per_hour == pytest.approx(7.7864)  # SpotPrice of p4d.24xlarge in use1-az1
    on_demand = _inventory(tmp_path, INVENTORY.replace("spot: true", "spot: false")
                           .replace("    interruptions_per_hour: 0.1\n", ""))
    assert load_cluster(on_demand).pools["burst"].price_per_hour == pytest.approx(32.7726)
    cloud = load_cloud_pools(path)["burst"]
    assert cloud.node_names == ("burst1", "burst2")
    assert cloud.launch_command == ("/opt/launch", "--name", "{node}", "--type", "{instance_type}", "--zone", "{zone}")
    assert (cloud.instance_type, cloud.region, cloud.zone, cloud.release_command) == \
        ("p4d.24xlarge", "us-east-1", "use1-az1", ())


@pytest.mark.parametrize(("edit", "expected"), [
    (("zone: use1-az1", "zone: use1-az9"), "cluster.yaml:14: pools.burst.zone: p4d.24xlarge has no row for region "
                                           "us-east-1 zone use1-az9 in {csv} (zones there: use1-az1, use1-az2, "
                                           "use1-az6)"),
    (("region: us-east-1\n    zone: use1-az1", "region: ap-south-1"),
     "cluster.yaml:13: pools.burst.region: p4d.24xlarge has no SpotPrice for ap-south-1 in {csv}"),
    (("type: a100x8\n    spot", "type: l4x1\n    spot"),
     "cluster.yaml:12: pools.burst.instance_type: p4d.24xlarge has 8 GPUs ({csv}:5) but node type l4x1 has 1"),
    (("instance_type: p4d.24xlarge", "instance_type: p9.large"),
     "cluster.yaml:12: pools.burst.instance_type: instance type 'p9.large' is not in {csv}"),
    (("    instance_type: p4d.24xlarge\n", ""),
     "cluster.yaml:8: pools.burst.instance_type: missing required key (price_csv gives the price of an instance "
     "type)"),
    (("price_csv: prices.csv", "price_csv: prices.csv\n    price_per_hour: 3"),
     "cluster.yaml:11: pools.burst.price_csv: give either price_per_hour or price_csv, not both"),
    (("--zone {zone}", "--zone {az}"),
     "cluster.yaml:18: pools.burst.launch_command: unknown placeholder {az} (allowed: {node}, {pool}, "
     "{instance_type}, {region}, {zone})"),
    (("--zone {zone}", "--zone '{zone}"),
     "cluster.yaml:18: pools.burst.launch_command: cannot split into words: No closing quotation"),
    (('"burst[1-2]"', '"burst[1-3]"'), "cluster.yaml:17: pools.burst.node_names: names 3 nodes, max_nodes is 2"),
    (('"burst[1-2]"', '"gpu[2-3]"'), "cluster.yaml:17: pools.burst.node_names: node name 'gpu2' is also in nodes"),
])
def test_pool_mistakes_name_the_inventory_line_and_key(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    path = _inventory(tmp_path, INVENTORY.replace(*edit))
    with pytest.raises(ConfigError) as error:
        load_cluster(path)
    csv_path = str(tmp_path / "prices.csv")
    assert str(error.value) == expected.replace("cluster.yaml", str(path)).replace("{csv}", csv_path)


@pytest.mark.parametrize(("edit", "expected"), [
    ((",Price,", ",Cost,"), "{csv}:1: Price: missing column (header has: InstanceType, AcceleratorName, "
                            "AcceleratorCount, vCPUs, MemoryGiB, GpuInfoName, GpuMemoryMiBPerGpu, Cost, SpotPrice, "
                            "Region, AvailabilityZone)"),
    ((",32.7726,7.786400,", ",32.7726,cheap,"), "{csv}:5: SpotPrice: not a number: 'cheap'"),
    ((",32.7726,7.786400,", ",-1,7.786400,"), "{csv}:5: Price: must be at least 0, got '-1'"),
    ((",32.7726,7.786400,", ",nan,7.786400,"), "{csv}:5: Price: not a finite number: 'nan'"),
    (("p4d.24xlarge,A100,8.0,96.0,1152.0,A100,40960,32.7726,7.786400,us-east-1,use1-az1",
      "p4d.24xlarge,A100,0,96.0,1152.0,A100,40960,32.7726,7.786400,us-east-1,use1-az1"),
     "{csv}:5: AcceleratorCount: must be above 0, got '0'"),
    (("use1-az1\n", "use1-az1,extra\n"), "{csv}:5: 12 cells, the header has 11"),
    (("A100,40960,32.7726,7.786400,us-east-1,use1-az1\n", "A100\n"),
     "{csv}:5: Price: missing cell (the row is shorter than the header)"),
])
def test_csv_mistakes_name_file_line_and_column_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            edit: tuple[str, str], expected: str) -> None:
    path = _inventory(tmp_path)
    csv_path = tmp_path / "prices.csv"
    text = csv_path.read_text()
    assert edit[0] in text
    csv_path.write_text(text.replace(edit[0], edit[1], 1))
    assert main(["check", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"greengpu: {expected.format(csv=csv_path)}\n"
