"""The equivalent-mutant list names mutants of functions that exist: a list that outlives a move or a rename matches
nothing any more, and the mutation job's report counts what it no longer knows as "left" (tests/mutation)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

_REPORT = Path(__file__).resolve().parents[2] / "mutation" / "report.py"
_spec = importlib.util.spec_from_file_location("greengpu_mutation_report", _REPORT)
assert _spec is not None and _spec.loader is not None
_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_report)
equivalent_mutants = _report.equivalent_mutants
"""The mutation job's own reader of the list (tests/mutation/report.py), loaded by path: it is no package."""

METHOD = re.compile(r"^(?P<module>[\w.]+)\.xǁ(?P<cls>\w+)ǁ(?P<function>\w+)__mutmut_\d+$")
FUNCTION = re.compile(r"^(?P<module>[\w.]+)\.x_(?P<function>\w+)__mutmut_\d+$")


def where(name: str) -> tuple[str, str | None, str]:
    """(module, class or None, function) of a mutant's name as mutmut writes it."""
    found = METHOD.match(name)
    if found is not None:
        return found["module"], found["cls"], found["function"]
    found = FUNCTION.match(name)
    assert found is not None, f"{name}: not a mutmut name"
    return found["module"], None, found["function"]


def test_every_equivalent_mutant_names_a_function_that_exists() -> None:
    missing = []
    for name in equivalent_mutants():
        module_name, cls, function = where(name)
        module = importlib.import_module(module_name)
        owner = getattr(module, cls, None) if cls is not None else module
        if owner is None or not hasattr(owner, function):
            missing.append(name)
    assert not missing, f"tests/mutation/equivalent.txt names functions that are gone (moved or renamed): {missing}"


def test_a_mutants_place_is_read_from_its_name() -> None:
    assert where("greengpu.sched.quota.xǁQuotaLedgerǁused__mutmut_3") == ("greengpu.sched.quota", "QuotaLedger", "used")
    assert where("greengpu.sched.placement.x__place_gang__mutmut_1") == ("greengpu.sched.placement", None,
                                                                           "_place_gang")
