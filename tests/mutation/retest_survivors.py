"""Forget mutmut's verdict on the mutants no test killed, so the next `run.sh` judges them again.

    python3 tests/mutation/retest_survivors.py ['greengpu.energy.*' ...]

mutmut keeps each mutant's verdict in `mutants/**.meta` and does not try a survivor again when only
the tests changed. After adding tests for survivors, this clears the survivors' (and the untested
mutants') verdicts, leaving the killed ones: a mutant the earlier tests killed stays killed by a
suite that only grew, so a run after this gives the figures of a fresh run in a fraction of its time.
Mutants listed in equivalent.txt keep their verdict: no test can kill them, and trying them again is
the slowest part of a run (every test that reaches them runs).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path

from report import equivalent_mutants

SURVIVED_OR_UNTESTED = {0, 5, 33, -15}  # mutmut's exit codes: survived, no tests (twice), stopped by hand (SIGTERM)


def main(patterns: list[str]) -> int:
    cleared = 0
    equivalent = equivalent_mutants()
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        verdicts = data["exit_code_by_key"]
        changed = False
        for name, code in verdicts.items():
            wanted = not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)
            if code in SURVIVED_OR_UNTESTED and name not in equivalent and wanted:
                verdicts[name] = None
                changed = True
                cleared += 1
        if changed:
            meta.write_text(json.dumps(data, indent=4))
    print(f"{cleared} surviving mutants will be tried again by the next run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
