"""The kept queue's run finder (greengpu.sched.pending_index._common_run): how many job ids of this cycle's
queue continue the last cycle's order from a point. Galloping and halving must give the plain count."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from greengpu.sched.pending_index import _common_run


def plain_run(new: tuple[int, ...], i: int, old: tuple[int, ...], j: int) -> int:
    count = 0
    while i + count < len(new) and j + count < len(old) and new[i + count] == old[j + count]:
        count += 1
    return count


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40),
       st.integers(0, 45), st.integers(0, 45))
def test_the_run_is_the_plain_count(new: list[int], old: list[int], i: int, j: int) -> None:
    assert _common_run(tuple(new), i, tuple(old), j) == plain_run(tuple(new), i, tuple(old), j)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.integers(0, 300), st.integers(0, 20))
def test_long_shared_stretches_end_exactly_where_they_differ(length: int, cut: int, offset: int) -> None:
    """A queue that mostly kept its order: one long run, broken at `cut` (or not at all)."""
    old = tuple(range(offset)) + tuple(range(1000, 1000 + length))
    new = list(range(1000, 1000 + length))
    if cut < length:
        new[cut] = -1
    expected = min(cut, length)
    assert _common_run(tuple(new), 0, old, offset) == expected
    assert _common_run(tuple(new), 0, old, offset) == plain_run(tuple(new), 0, old, offset)
