"""Reading a monthly report's figures (greengpu.report.month_types): numbers come back as they are, a
missing or null figure as 0 (or None where the report shows a dash), anything else is refused."""

from __future__ import annotations

import pytest

from greengpu.report.month_types import maybe_number, number


def test_a_figure_comes_back_as_the_number_it_is() -> None:
    figures = {"cost": 12.5, "jobs_started": 3, "name": "alice"}
    assert number(figures, "cost") == 12.5
    assert number(figures, "jobs_started") == 3 and isinstance(number(figures, "jobs_started"), int)


def test_a_missing_or_null_figure_is_zero_or_none() -> None:
    figures = {"chargeback": None}
    assert number(figures, "chargeback") == 0.0 and number(figures, "cost") == 0.0
    assert maybe_number(figures, "chargeback") is None and maybe_number(figures, "cost") is None
    assert maybe_number({"idle_share": 0.25}, "idle_share") == 0.25


@pytest.mark.parametrize("value", ["12.5", True, {"ran": 1}, ["east"]])
def test_a_figure_that_is_not_a_number_is_refused(value: object) -> None:
    with pytest.raises(TypeError, match="'cost' is not a number"):
        number({"cost": value}, "cost")
