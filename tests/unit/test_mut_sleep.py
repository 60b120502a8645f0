"""A node's idle draw (greengpu.energy.sleep.idle_draw_w) by hand: what the sleep planner saves per node."""

from __future__ import annotations

from schedkit import node_type

from greengpu.energy.sleep import idle_draw_w


def test_idle_draw_is_the_host_and_every_idle_gpu() -> None:
    # schedkit's node type: host 400 W idle, each GPU 50 W idle; 8 GPUs: 800 W, 2 GPUs: 500 W.
    assert idle_draw_w(node_type(8)) == 800.0
    assert idle_draw_w(node_type(2)) == 500.0
