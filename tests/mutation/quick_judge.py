"""Judge mutants fast with a chosen set of test files, in one process, and record the verdicts in mutmut's cache.

    python3 tests/mutation/quick_judge.py 'greengpu.sched.slack.*' --tests tests/unit/sched/test_slack.py

`run.sh` runs, for every mutant, every unit and property test that reaches the mutated function: for
the scheduler that is hundreds of tests and seconds per mutant on a small machine. This runs only the
test files given (their fast tests), in one Python process: mutmut's mutants read `MUTANT_UNDER_TEST`
at each call, so one import of pandas and numpy and one collection of the tests serve them all (the
tests must pass without a mutant first). It judges the mutants matching the
patterns that mutmut has not judged or that survived (equivalent ones are skipped): killed when a test
fails (a test of the suite noticed), a timeout (killed, as mutmut counts it) past `--timeout-s`, else
survived. A survivor here may still be killed by a test outside the files given, so the score it gives
is a lower bound; `run.sh` after `retest_survivors.py` judges its survivors with every test.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

import pytest
from _pytest.runner import runtestprotocol
from report import equivalent_mutants

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "mutants"
UNJUDGED_OR_SURVIVED = {None, 0, 5}


class _Hang(BaseException):
    """Raised by the alarm: a BaseException, so that code under test catching Exception cannot swallow it."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="+", help="mutant-name globs")
    parser.add_argument("--tests", nargs="+", required=True, help="test files (and pytest options) to judge with")
    parser.add_argument("--timeout-s", type=int, default=20)
    args, pytest_options = parser.parse_known_args()  # e.g. --deselect FILE::TEST
    equivalent = equivalent_mutants()
    metas = sorted(MUTANTS.rglob("*.py.meta"))
    todo = [name for meta in metas for name, code in json.loads(meta.read_text())["exit_code_by_key"].items()
            if code in UNJUDGED_OR_SURVIVED and name not in equivalent
            and any(fnmatch.fnmatch(name, p) for p in args.patterns)]
    os.chdir(MUTANTS)
    sys.path.insert(0, str(MUTANTS))
    os.environ.setdefault("GREENGPU_PUBLIC_DATA", str(ROOT / "data"))
    os.environ.setdefault("GREENGPU_PROPERTY_EXAMPLES", "100")
    import greengpu
    if not greengpu.__file__ or not greengpu.__file__.startswith(str(MUTANTS)):
        sys.exit("run `tests/mutation/run.sh` once first: the mutated copy is not in ./mutants")
    given = [*args.tests, *pytest_options]
    # Test files are the repository's (not the copies in ./mutants); a --deselect node id stays relative to
    # the repository, as pytest names its tests.
    tests = [str(ROOT / t) if (t.endswith(".py") or "::" in t) and given[i - 1] != "--deselect" else t
             for i, t in enumerate(given)]
    signal.signal(signal.SIGALRM, _on_alarm)
    # Stopped by hand (SIGTERM or Ctrl-C), it still records what it judged so far.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    judge = _Judge(todo, args.timeout_s, metas)
    try:
        # --tb=no: a verdict needs no traceback, and formatting one means parsing the whole mutated module
        # (thousands of mutants) for every frame in it, which took seconds per killed mutant.
        rc = int(pytest.main(["-q", "--tb=no", "-p", "no:cacheprovider", *tests], plugins=[judge]))
    finally:
        _record(metas, judge.verdicts)
    if judge.problem:
        sys.exit(judge.problem)
    if rc not in (0, 1):
        sys.exit(f"pytest exit {rc}")
    verdicts = judge.verdicts
    killed = sum(1 for c in verdicts.values() if c)
    print(f"{len(verdicts)} mutants judged with {len(args.tests)} test arguments: {killed} killed, "
          f"{len(verdicts) - killed} survived them")
    return 0


class _Judge:
    """A pytest plugin that collects the tests once, then runs them against each mutant in turn.

    Collecting (importing and walking the test files) costs more than running a fast file's tests; doing it
    once instead of once per mutant makes judging several times faster. Each test runs through pytest's own
    protocol (its fixtures set up and torn down), stopping at the first failure, as `pytest -x` would.
    """

    def __init__(self, todo: list[str], timeout_s: int, metas: list[Path]) -> None:
        self.todo = todo
        self.timeout_s = timeout_s
        self.metas = metas
        self.verdicts: dict[str, int] = {}
        self.problem = ""

    def _fails(self, items: list[pytest.Item]) -> bool:
        return any(report.failed for item in items for report in runtestprotocol(item, nextitem=None, log=False))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = list(session.items)
        os.environ["MUTANT_UNDER_TEST"] = ""  # no mutant: the tests must pass, or every verdict would be "killed"
        if not items or self._fails(items):
            self.problem = "the tests given do not pass (or none was collected) without a mutant: nothing judged"
            return True
        for number, name in enumerate(self.todo, 1):
            os.environ["MUTANT_UNDER_TEST"] = name
            signal.alarm(self.timeout_s)
            try:
                self.verdicts[name] = 1 if self._fails(items) else 0
            except _Hang:
                self.verdicts[name] = 24  # mutmut's code for a timeout
            finally:
                signal.alarm(0)
            print(f"quick_judge {number}/{len(self.todo)} {name}: "
                  f"{'killed' if self.verdicts[name] else 'SURVIVED'}", file=sys.stderr, flush=True)
            if number % 50 == 0:
                _record(self.metas, self.verdicts)
        os.environ["MUTANT_UNDER_TEST"] = ""
        return True


def _record(metas: list[Path], verdicts: dict[str, int]) -> None:
    """Write the verdicts into mutmut's cache (the .meta file of each mutated module)."""
    for meta in metas:
        data = json.loads(meta.read_text())
        found = {n: c for n, c in verdicts.items() if n in data["exit_code_by_key"]}
        if found and any(data["exit_code_by_key"].get(n) != c for n, c in found.items()):
            data["exit_code_by_key"].update(found)
            meta.write_text(json.dumps(data, indent=4))


if __name__ == "__main__":
    sys.exit(main())
