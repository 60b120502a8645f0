"""`greengpu cloud`'s pieces that need no Slurm: which names are cloud nodes, the provider command's argv,
its outcome (exit code, timeout, missing program), the address it prints, the jobs a node is resumed for,
and refusals before anything runs. tests/integration/test_slurm_cloud.py runs the whole thing under a
real slurmctld."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cloud_pools
from greengpu.control.cloud.cloud_nodes import command_argv, jobs_by_node, parse_address, run_provider, split_names

INVENTORY = """\
site: {{pue: 1.2, price_per_kwh: 0.1}}
node_types:
  gpu4: {{gpus: 4, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, host_idle_w: 300}}
nodes:
  - {{name: "node[1-2]", type: gpu4}}
pools:
  spot:
    type: gpu4
    spot: true
    price_per_hour: 4.1
    instance_type: p4d.24xlarge
    region: us-east-1
    zone: use1-az2
    max_nodes: 2
    launch_command: {launch}
  od: {{type: gpu4, price_per_hour: 16.4, max_nodes: 1}}
"""


def _inventory(tmp_path: Path, launch: str = "/bin/true {node}") -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(INVENTORY.format(launch=launch))
    return path


def test_cloud_node_names_default_to_the_pool_name_and_split_from_the_others(tmp_path: Path) -> None:
    pools = load_cloud_pools(_inventory(tmp_path))
    assert pools["spot"].node_names == ("spot-1", "spot-2")
    assert pools["od"].node_names == ()  # no launch or release command: a pool for the replay only
    assert split_names("node1,spot-[1-2],od-1", pools) == (["spot-1", "spot-2"], ["node1", "od-1"])


def test_placeholders_fill_whole_words_and_never_split_them(tmp_path: Path) -> None:
    pool = load_cloud_pools(_inventory(tmp_path, "/opt/launch --tag 'pool={pool} zone={zone}' {node} {region}"))["spot"]
    assert command_argv(pool.launch_command, "spot-1", pool) == \
        ["/opt/launch", "--tag", "pool=spot zone=use1-az2", "spot-1", "us-east-1"]


def test_a_provider_commands_outcome_is_its_exit_code_within_its_timeout(tmp_path: Path) -> None:
    ok = run_provider([sys.executable, "-c", "print('booting'); print('10.0.0.7 ip-10-0-0-7')"], 10)
    assert (ok.ok, ok.last_line) == (True, "10.0.0.7 ip-10-0-0-7")
    refused = run_provider([sys.executable, "-c", "import sys; sys.exit('InsufficientInstanceCapacity')"], 10)
    assert (refused.ok, refused.message) == (False, "exit 1: InsufficientInstanceCapacity")
    slow = run_provider([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert (slow.ok, slow.message) == (False, "no answer within 0.5 s (killed)")
    missing = run_provider([str(tmp_path / "no-such-provider")], 5)
    assert not missing.ok and missing.message.startswith("cannot run ")


@pytest.mark.parametrize(("line", "expected"), [
    ("10.0.0.7", ("10.0.0.7", None)), ("10.0.0.7 ip-10-0-0-7.ec2.internal", ("10.0.0.7", "ip-10-0-0-7.ec2.internal")),
    ("fd00::7 gpu-7", ("fd00::7", "gpu-7")),
])
def test_the_address_a_launch_prints(line: str, expected: tuple[str, str | None]) -> None:
    assert parse_address(line) == expected


@pytest.mark.parametrize("line", ["", "10.0.0.7 a b", "-oProxyCommand=x", "10.0.0.7 host;rm", "instance pending..."])
def test_anything_else_is_not_an_address(line: str) -> None:
    with pytest.raises(ValueError):
        parse_address(line)


def test_the_jobs_each_node_is_resumed_for(tmp_path: Path) -> None:
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"all_nodes_resume": "spot-[1-2],od-1", "jobs": [
        {"job_id": 7, "nodes": "spot-[1-2]"}, {"job_id": 8, "nodes": "od-1"}, {"job_id": 9, "nodes": "spot-2"}]}))
    assert jobs_by_node(str(resume_file)) == {"spot-1": ["7"], "spot-2": ["7", "9"], "od-1": ["8"]}
    resume_file.write_text("{not json")
    assert jobs_by_node(str(resume_file)) == {}
    assert jobs_by_node(None) == {}


def test_names_that_are_not_cloud_nodes_are_refused_without_others(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    code = main(["cloud", "--cluster", str(_inventory(tmp_path)), "--audit", str(audit), "resume", "node1,spot-1"])
    assert code == 2
    assert capsys.readouterr().err == "greengpu: node1: not cloud nodes of any pool (give --others PROGRAM for the " \
                                      "other nodes)\n"
    assert not audit.exists()  # nothing was launched


def test_a_pool_without_a_release_command_is_refused_before_anything_runs(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cloud", "--cluster", str(_inventory(tmp_path)), "--audit", str(tmp_path / "a.jsonl"), "suspend",
                 "spot-1"])
    assert code == 2
    assert capsys.readouterr().err == "greengpu: pool spot has no release_command in the inventory: its nodes cannot " \
                                      "be released\n"


def test_other_nodes_go_to_the_on_premises_program_as_one_hostlist(tmp_path: Path) -> None:
    record = tmp_path / "others.txt"
    others = tmp_path / "on-premises-resume"
    others.write_text(f"#!{sys.executable}\nimport sys\nopen({str(record)!r}, 'a').write(' '.join(sys.argv[1:]))\n")
    others.chmod(0o755)
    code = main(["cloud", "--cluster", str(_inventory(tmp_path)), "--audit", str(tmp_path / "a.jsonl"), "--others",
                 str(others), "resume", "node[1-2]"])
    assert code == 0
    assert record.read_text() == "node[1-2]"


DEPLOY_SLURM = Path(__file__).resolve().parents[3] / "deploy" / "slurm"


@pytest.mark.parametrize(("wrapper", "subcommand", "on_premises"), [
    ("greengpu-cloud-resume", "resume", "greengpu-slurm-resume"),
    ("greengpu-cloud-suspend", "suspend", "greengpu-slurm-suspend"),
    ("greengpu-cloud-resume-fail", "resume-failed", "greengpu-slurm-resume-fail"),
])
def test_the_shipped_wrappers_hand_other_nodes_to_the_on_premises_hooks(wrapper: str, subcommand: str,
                                                                       on_premises: str) -> None:
    from greengpu.cli import cli

    text = (DEPLOY_SLURM / wrapper).read_text()
    words = " ".join(line.rstrip("\\").strip() for line in text.splitlines() if not line.startswith("#")).split()
    assert words[:3] == ["exec", "/usr/local/bin/greengpu", "cloud"] and words[-2:] == [subcommand, '"$1"']
    options = dict(zip(words[3:-2:2], words[4:-2:2], strict=True))
    assert options["--others"] == f"/usr/local/sbin/{on_premises}" and (DEPLOY_SLURM / on_premises).exists()
    group = cli.commands["cloud"]
    known = {opt for param in group.params for opt in getattr(param, "opts", [])}
    assert set(options) <= known and subcommand in group.commands  # type: ignore[attr-defined]
    conf = (DEPLOY_SLURM / "slurm.conf.greengpu-cloud").read_text()
    assert f"/usr/local/sbin/{wrapper}\n" in conf


def test_a_live_pool_of_more_nodes_than_slurm_could_list_is_refused(tmp_path: Path) -> None:
    from greengpu.errors import ConfigError

    path = _inventory(tmp_path)
    path.write_text(path.read_text().replace("max_nodes: 2", "max_nodes: 100001"))
    with pytest.raises(ConfigError, match=r"pools\.spot\.max_nodes: 100001 nodes is more than 100000 Slurm cloud"):
        load_cloud_pools(path)
    path.write_text(INVENTORY.format(launch="/bin/true").replace("max_nodes: 1}", "max_nodes: 1000000000}"))
    assert load_cloud_pools(path)["od"].node_names == ()  # a replay-only pool may be as large as it likes
