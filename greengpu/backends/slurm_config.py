"""`SuspendExcNodes` and `SuspendExcParts` from `scontrol show config`: the nodes Slurm keeps out of power saving,
which greengpu keeps awake too (`slurm power-down`, the daemon's Slurm body, `check`). Translates, never decides.

Slurm's syntax (slurm.conf(5)): `SuspendExcNodes=nid[10-20]:4,nid[60-70]` keeps 4 usable nodes of `nid[10-20]`
and every node of `nid[60-70]` up; node lists before a `:count` belong to that count's set (`n[1-3],n[10-20]:4`
is one set of 14 nodes keeping 4); `(null)` or nothing: none. `SuspendExcParts=debug,gpu`: every node of those
partitions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import hostlist

from greengpu.backends import slurm

NONE_VALUES = frozenset({"", "(null)", "none", "n/a"})
CONFIG_LINE = re.compile(r"^\s*(\w+)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True)
class SuspendExclusions:
    """What Slurm keeps out of power saving: sets of nodes with the count of them kept up (None: all of them),
    and whole partitions."""

    sets: tuple[tuple[frozenset[str], int | None], ...] = ()
    partitions: frozenset[str] = frozenset()
    partition_nodes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The nodes of each excluded partition, as Slurm lists them."""

    def always(self, node: str) -> bool:
        """Whether Slurm never powers `node` down: in a set without a count, or in an excluded partition."""
        if any(count is None and node in names for names, count in self.sets):
            return True
        return any(node in self.partition_nodes.get(p, frozenset()) for p in self.partitions)

    def excluded_nodes(self, known: Iterable[str]) -> set[str]:
        """The nodes of `known` that any exclusion names (counted sets included)."""
        named = set().union(*(names for names, _ in self.sets), *self.partition_nodes.values())
        return {node for node in known if node in named}

    def may_suspend(self, candidates: Sequence[str], up: Iterable[str]) -> list[str]:
        """The candidates (in order) that may be powered down now: none Slurm always keeps up, and from a counted
        set only while more than its count of its nodes stay `up` (awake, usable) besides those taken."""
        up_now = set(up)
        left = {index: len(names & up_now) - (count or 0) for index, (names, count) in enumerate(self.sets)
                if count is not None}
        chosen: list[str] = []
        for node in candidates:
            if self.always(node):
                continue
            sets = [index for index, (names, count) in enumerate(self.sets) if count is not None and node in names]
            if any(left[index] <= 0 for index in sets):
                continue
            for index in sets:
                left[index] -= 1
            chosen.append(node)
        return chosen


def _split_top_level(text: str) -> list[str]:
    """`a[1-2,5],b:3` -> ['a[1-2,5]', 'b:3']: commas outside brackets."""
    parts, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:position])
            start = position + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_exc_nodes(value: str) -> tuple[tuple[frozenset[str], int | None], ...]:
    """`SuspendExcNodes`'s value as sets of nodes with their counts (see the module docstring). ValueError with
    the value when it is no hostlist or a count is not a whole number."""
    if value.strip().lower() in NONE_VALUES:
        return ()
    sets: list[tuple[frozenset[str], int | None]] = []
    pending: list[str] = []
    for part in _split_top_level(value.strip()):
        expression, sep, count_text = part.rpartition(":") if ":" in part.split("]")[-1] else (part, "", "")
        try:
            pending.extend(hostlist.expand_hostlist(expression))
        except hostlist.BadHostlist as error:
            raise ValueError(f"SuspendExcNodes={value!r}: {expression!r} is not a hostlist ({error})") from None
        if sep:
            if not count_text.isdigit():
                raise ValueError(f"SuspendExcNodes={value!r}: count {count_text!r} is not a whole number")
            sets.append((frozenset(pending), int(count_text)))
            pending = []
    if pending:
        sets.append((frozenset(pending), None))
    return tuple(sets)


def parse_exc_parts(value: str) -> frozenset[str]:
    """`SuspendExcParts`'s value as partition names."""
    if value.strip().lower() in NONE_VALUES:
        return frozenset()
    return frozenset(p.strip() for p in value.split(",") if p.strip())


def config_values(text: str) -> dict[str, str]:
    """`scontrol show config` (`Key = value` lines) or slurm.conf (`Key=value`, `#` comments) text as a mapping
    with lower-case keys; the last setting wins."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        found = CONFIG_LINE.match(raw.split("#", 1)[0])
        if found and " " not in found.group(1):
            values[found.group(1).lower()] = found.group(2)
    return values


def partition_nodes(text: str) -> dict[str, frozenset[str]]:
    """`scontrol -o show partition` output -> the nodes of each partition."""
    found: dict[str, frozenset[str]] = {}
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "PartitionName" in fields:
            nodes = fields.get("Nodes", "")
            found[fields["PartitionName"]] = (frozenset() if nodes.lower() in NONE_VALUES
                                              else frozenset(hostlist.expand_hostlist(nodes)))
    return found


def exclusions_from(config_text: str, partitions_text: str | None) -> SuspendExclusions:
    """The exclusions in `scontrol show config` output (and the partitions' nodes, for SuspendExcParts).
    ValueError naming the setting when one does not parse."""
    values = config_values(config_text)
    sets = parse_exc_nodes(values.get("suspendexcnodes", ""))
    parts = parse_exc_parts(values.get("suspendexcparts", ""))
    nodes_of: dict[str, frozenset[str]] = {}
    if parts and partitions_text is not None:
        try:
            nodes_of = partition_nodes(partitions_text)
        except hostlist.BadHostlist as error:
            raise ValueError(f"scontrol show partition: a node list is not a hostlist ({error})") from None
    return SuspendExclusions(sets, parts, {p: nodes_of.get(p, frozenset()) for p in parts})


def read_exclusions(run: Callable[..., str] = slurm.run) -> SuspendExclusions:
    """The exclusions the running slurmctld holds. SlurmError when Slurm cannot be asked or its answer does not
    parse (callers then keep nodes awake)."""
    config_text = run("scontrol", "show", "config")
    values = config_values(config_text)
    partitions_text = None
    if parse_exc_parts(values.get("suspendexcparts", "")):
        partitions_text = run("scontrol", "-o", "show", "partition")
    try:
        return exclusions_from(config_text, partitions_text)
    except ValueError as error:
        raise slurm.SlurmError(f"scontrol show config: {error}") from None



def conf_nodes(text: str) -> list[str]:
    """The node names of slurm.conf's `NodeName=` lines (DEFAULT left out). ValueError on a bad hostlist."""
    names: list[str] = []
    for raw in text.splitlines():
        fields = dict(part.split("=", 1) for part in raw.split("#", 1)[0].split() if "=" in part)
        value = next((v for k, v in fields.items() if k.lower() == "nodename"), None)
        if value is None or value.upper() == "DEFAULT":
            continue
        try:
            names.extend(hostlist.expand_hostlist(value))
        except hostlist.BadHostlist as error:
            raise ValueError(f"NodeName={value!r} is not a hostlist ({error})") from None
    return names


def disagreements(inventory_nodes: Sequence[str], exclusions: SuspendExclusions, policy_sleeps: bool,
                  slurm_nodes: Sequence[str] = ()) -> list[str]:
    """Where the inventory and Slurm's power-save exclusions disagree, one line each: nodes the policy may sleep
    that Slurm keeps up (greengpu keeps them up too), and the reverse, nodes Slurm may power down on its own timer
    that the inventory does not list (greengpu's SuspendProgram cannot suspend or wake them: list them in
    SuspendExcNodes, docs/DEPLOY.md)."""
    lines: list[str] = []
    known = set(inventory_nodes)
    always = sorted(node for node in known if exclusions.always(node))
    if always and policy_sleeps:
        lines.append(f"{hostlist.collect_hostlist(always)}: the policy may sleep them but Slurm keeps them out of "
                     "power saving (SuspendExcNodes/SuspendExcParts): greengpu will not sleep them")
    for names, count in exclusions.sets:
        if count is not None and policy_sleeps and names & known:
            lines.append(f"{hostlist.collect_hostlist(sorted(names & known))}: Slurm keeps {count} of them up "
                         "(SuspendExcNodes): greengpu sleeps only the rest")
    unmanaged = sorted(node for node in set(slurm_nodes) - known if not exclusions.always(node))
    if unmanaged:
        lines.append(f"{hostlist.collect_hostlist(unmanaged)}: Slurm may power them down (not in SuspendExcNodes/"
                     "SuspendExcParts) but the inventory does not list them: greengpu's hooks cannot suspend or "
                     "wake them")
    for partition in sorted(exclusions.partitions):
        if not exclusions.partition_nodes.get(partition):
            lines.append(f"SuspendExcParts names partition {partition!r}, which has no nodes Slurm lists")
    return lines
