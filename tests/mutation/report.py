"""Print the mutation score per module from mutmut's cached results, equivalent mutants counted apart.

    python3 tests/mutation/report.py ['greengpu.energy.*' ...] [--elapsed-s N]

The score is killed / (mutants tried - equivalent): a timeout counts as killed (the mutant made the
tests hang, which they noticed), a survivor or a mutant no test reaches counts against the score.
Equivalent mutants are listed, each with the reason no test can tell it from the original, in
tests/mutation/equivalent.txt beside this file.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

EQUIVALENT_FILE = Path(__file__).with_name("equivalent.txt")
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
LINE = re.compile(r"^\s*(?P<name>\S+): (?P<status>.+?)\s*$")


def equivalent_mutants(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """Mutant name -> reason, from lines `NAME  REASON` (blank lines and # comments skipped)."""
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, _, reason = text.partition(" ")
        if not reason.strip():
            sys.exit(f"{path}:{number}: {name}: an equivalent mutant needs a reason")
        found[name] = reason.strip()
    return found


def module_of(mutant: str) -> str:
    """`greengpu.sched.quota.xǁQuotaLedgerǁused__mutmut_3` -> `greengpu.sched.quota`."""
    head = mutant.split("__mutmut_")[0]
    return head.rsplit(".", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="mutant-name globs (default: every mutant tried)")
    parser.add_argument("--elapsed-s", type=int, default=None, help="run time to print with the report")
    args = parser.parse_args()
    listing = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                             capture_output=True, text=True, check=True).stdout
    equivalent = equivalent_mutants()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[str] = []
    for line in listing.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        name, status = match["name"], match["status"]
        if args.patterns and not any(fnmatch.fnmatch(name, p) for p in args.patterns):
            continue
        if status == "not checked":
            continue
        module = module_of(name)
        if name in equivalent:
            counts[module]["equivalent"] += 1
        elif status in KILLED:
            counts[module]["killed"] += 1
        else:
            counts[module]["not killed"] += 1
            survivors.append(f"{name}: {status}")
    if not counts:
        print("no mutants tried yet")
        return 1
    print(f"{'module':40} {'mutants':>8} {'equiv.':>7} {'killed':>7} {'left':>6} {'score':>7}")
    total: Counter[str] = Counter()
    for module in sorted(counts):
        row = counts[module]
        total.update(row)
        print(_row(module, row))
    print(_row("all", total))
    if args.elapsed_s is not None:
        print(f"run time: {args.elapsed_s // 60} min {args.elapsed_s % 60} s")
    if survivors:
        print(f"\nnot killed ({len(survivors)}; `python3 -m mutmut show NAME` for the diff):")
        for line in survivors:
            print(f"  {line}")
    return 0


def _row(module: str, row: Counter[str]) -> str:
    tried = row["killed"] + row["not killed"] + row["equivalent"]
    judged = row["killed"] + row["not killed"]
    score = f"{100.0 * row['killed'] / judged:.1f}%" if judged else "-"
    return f"{module:40} {tried:>8} {row['equivalent']:>7} {row['killed']:>7} {row['not killed']:>6} {score:>7}"


if __name__ == "__main__":
    sys.exit(main())
