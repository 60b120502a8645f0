"""Rounding that conserves a total: rows of a bill rounded to the cent (or the gram) still add up to the
rounded total, exactly, whatever the number of rows.

Largest remainder (Hamilton's method): every part is rounded down to whole units, then the units the
total still lacks go one each to the parts with the largest remainders. No part moves by a unit or more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def conserving_units(parts: Sequence[float], unit: float) -> tuple[list[int], int]:
    """(each part in whole `unit`s, the total in whole units), the parts adding up to the total, which is
    the exact sum of `parts` rounded to the nearest unit."""
    scaled = [part / unit for part in parts]
    total = round(math.fsum(scaled))
    floors = [math.floor(value) for value in scaled]
    missing = total - sum(floors)
    # Float error can put the sum a hair outside [floors, floors + n]; clamp to what can be given out.
    missing = max(0, min(missing, len(parts)))
    order = sorted(range(len(parts)), key=lambda i: (-(scaled[i] - floors[i]), i))
    for index in order[:missing]:
        floors[index] += 1
    return floors, sum(floors)


def decimals_of(unit: float) -> int:
    """Decimal places of a unit such as 0.01 (2) or 0.001 (3)."""
    return max(0, -math.floor(math.log10(unit) + 1e-9))


def as_decimal(units: int, unit: float) -> float:
    """Whole units back to the nearest float of the decimal number (7 cents: 0.07, not 0.07000000000000001)."""
    return round(units * unit, decimals_of(unit))
