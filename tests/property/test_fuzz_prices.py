"""The cloud price CSV an inventory pool names, and the pool's price keys, fuzzed through the command line's
exit path (`greengpu check`): exit 0, or exactly one line on stderr and exit 2, never a traceback or a hang.
Same mutations, bounds and CI settings as tests/property/test_input_fuzz.py (its helpers are reused)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_input_fuzz import ODD_VALUES, _csv_ops, assert_clean, fuzz, mutate_csv, run_cli, write_mutated

PRICES = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfoName,GpuMemoryMiBPerGpu,Price,SpotPrice,Region,AvailabilityZone
p4d.24xlarge,A100,8.0,96.0,1152.0,A100,40960,39.32,,ap-south-1,aps1-az1
p4d.24xlarge,A100,8.0,96.0,1152.0,A100,40960,32.7726,7.786400,us-east-1,use1-az1
p4d.24xlarge,A100,8.0,96.0,1152.0,A100,40960,32.7726,9.872200,us-east-1,use1-az2
g6.2xlarge,L4,1.0,8.0,32.0,L4,22888,0.9776,0.449300,us-east-1,use1-az1
"""
"""Rows of SkyPilot's public AWS catalog (examples/cloud-prices/README.md credits the source)."""

CLUSTER = """\
site: {pue: 1.2, price_per_kwh: 0.1}
node_types:
  a100x8: {gpus: 8, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, host_idle_w: 450}
nodes:
  - {name: "gpu[1-2]", type: a100x8}
pools:
  spot:
    type: a100x8
    spot: true
    price_csv: prices.csv
    instance_type: p4d.24xlarge
    region: us-east-1
    zone: use1-az2
    max_nodes: 2
    launch_command: /opt/launch {node} {instance_type} {region} {zone}
  ondemand: {type: a100x8, price_csv: prices.csv, instance_type: p4d.24xlarge, region: ap-south-1, max_nodes: 1}
"""
POOL_VALUES = ["p4d.24xlarge", "g6.2xlarge", "us-east-1", "ap-south-1", "use1-az1", "aps1-az1", "prices.csv",
               "missing.csv", ".", "/dev/null", "{node}", "{x}", "'", "a[1-", "spot[1-2]"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("greengpu-fuzz-prices")


def _check(workdir: Path, cluster: str) -> None:
    path = workdir / "cluster.yaml"
    path.write_text(cluster, encoding="utf-8")
    code, out, err = run_cli("check", "--cluster", str(path), "--json")
    assert_clean(code, err, out=out)


def test_the_base_inputs_are_valid(workdir: Path) -> None:
    (workdir / "prices.csv").write_text(PRICES, encoding="utf-8")
    _check(workdir, CLUSTER)
    code, _, err = run_cli("check", "--cluster", str(workdir / "cluster.yaml"))
    assert code == 0, err


@fuzz(80)
@given(data=st.data())
def test_price_csv_mutations(workdir: Path, data: st.DataObject) -> None:
    mutated = mutate_csv(PRICES, ",", data.draw(_csv_ops(11), label="ops"))
    write_mutated(workdir / "prices.csv", mutated, data)
    _check(workdir, CLUSTER)


@fuzz(60)
@given(key=st.sampled_from(["instance_type", "region", "zone", "price_csv", "launch_command", "node_names",
                            "max_nodes", "spot"]),
       value=st.one_of(st.sampled_from(POOL_VALUES), ODD_VALUES))
def test_pool_price_keys_mutations(workdir: Path, key: str, value: str) -> None:
    (workdir / "prices.csv").write_text(PRICES, encoding="utf-8")
    lines = [line for line in CLUSTER.splitlines() if not line.startswith(f"    {key}:")]
    at = lines.index("    type: a100x8") + 1
    lines.insert(at, f"    {key}: {value}")
    _check(workdir, "\n".join(lines) + "\n")
