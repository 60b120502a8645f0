"""The simulated nodes: power states, what each GPU draws, and the cluster's total draw.

Every change to a node goes through `NodeFleet.set_node`, which keeps the cluster's GPU and host
watts as running sums (a replay changes one node at a time, tens of thousands of times) and, when a
ledger is asked for, meters the node's draw up to the change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from greengpu.accounting.attribution import Attribution
from greengpu.model import Cluster, NodeState, PowerState
from greengpu.sleep.suspends import NodeView, idle_draw_w

READY = (PowerState.AWAKE, PowerState.WAKING)
"""Power states in which a node without work counts towards the warm reserve."""


@dataclass
class SimNode:
    """One simulated node."""

    name: str
    type_name: str
    gpus: int
    gpu_idle_w: float
    host_idle_w: float
    host_sleep_w: float
    boot_s: float
    power: PowerState = PowerState.AWAKE
    power_since_s: float = 0.0
    jobs: int = 0
    gpu_users: dict[int, list[float]] = field(default_factory=dict)
    """Per busy GPU, the busy watts of each job on it (capping differs by class; a shared GPU draws the most)."""
    idle_since_s: float | None = 0.0
    idle_token: int = 0
    """Bumped whenever the node's idleness changes: an older idle check is stale."""
    draw_since_s: float = 0.0
    """When the node's draw last changed (per-node metering for the ledger)."""
    idle_w: float = 0.0
    """What it draws awake and without work (`sleep.suspends.idle_draw_w`)."""

    def draw_w(self) -> tuple[float, float]:
        """(GPU watts, host watts) in the node's current state."""
        if self.power is PowerState.ASLEEP:
            return 0.0, self.host_sleep_w
        if self.power is PowerState.FAILED:
            return 0.0, 0.0
        users = self.gpu_users
        busy_w = sum(max(watts) for watts in users.values()) if users else 0.0
        return busy_w + (self.gpus - len(users)) * self.gpu_idle_w, self.host_idle_w

    def view(self) -> NodeView:
        """The node as the sleep lever sees it."""
        return NodeView(self.name, self.gpus, self.power, self.power_since_s, self.jobs > 0, self.idle_since_s,
                        self.idle_w)


class NodeFleet:
    """Every simulated node, their power states as the core sees them, and the cluster's draw."""

    def __init__(self, cluster: Cluster, attribution: Attribution | None) -> None:
        self.nodes: dict[str, SimNode] = {}
        for node in cluster.nodes:
            t = cluster.node_types[node.type_name]
            self.nodes[node.name] = SimNode(node.name, node.type_name, t.gpus, t.gpu_idle_w, t.host_idle_w,
                                            t.host_sleep_w, t.boot_s, idle_w=idle_draw_w(t))
        self.attribution = attribution
        self.gpu_w = 0.0
        self.host_w = 0.0
        self.asleep_nodes = 0
        self.node_states: Mapping[str, NodeState] = {}
        """Nodes not plainly awake, as the core's snapshot takes them."""

    def start(self, origin_s: float) -> None:
        """Every node awake and idle at the trace's first submit, awake since long before."""
        for node in self.nodes.values():
            node.idle_since_s = origin_s
            node.power_since_s = origin_s - 86_400.0
            node.draw_since_s = origin_s
            gpu_w, host_w = node.draw_w()
            self.gpu_w += gpu_w
            self.host_w += host_w

    def set_node(self, node: SimNode, change: Callable[[], None], now_s: float) -> None:
        """Apply `change` to `node`, keeping the cluster's draw (and the ledger's meter) up to date."""
        gpu_before, host_before = node.draw_w()
        if self.attribution is not None:
            self.meter_node(node, gpu_before, host_before, now_s)
        change()
        gpu_after, host_after = node.draw_w()
        self.gpu_w += gpu_after - gpu_before
        self.host_w += host_after - host_before

    def meter_node(self, node: SimNode, gpu_w: float, host_w: float, now_s: float) -> None:
        """Charge the node's draw since its last change to the ledger."""
        assert self.attribution is not None
        if now_s > node.draw_since_s:
            self.attribution.node_draw(node.name, node.gpus, node.draw_since_s, now_s, gpu_w, host_w,
                                       node.power is PowerState.ASLEEP)
        node.draw_since_s = now_s

    def meter_all(self, now_s: float) -> None:
        """Charge every node's draw up to `now_s` (the end of a replay)."""
        for node in self.nodes.values():
            self.meter_node(node, *node.draw_w(), now_s)

    def set_power(self, node: SimNode, power: PowerState, now_s: float) -> None:
        """Move `node` to `power` now."""
        self.asleep_nodes += (power is PowerState.ASLEEP) - (node.power is PowerState.ASLEEP)

        def change() -> None:
            node.power = power
            node.power_since_s = now_s

        self.set_node(node, change, now_s)
        # A new mapping, never an in-place change: the core recognises a mapping it has already applied.
        states = dict(self.node_states)
        if power is PowerState.AWAKE:
            states.pop(node.name, None)
        else:
            states[node.name] = NodeState(power=power, since_s=now_s)
        self.node_states = states

    def any_in_transition(self) -> bool:
        """Whether a node is waking or suspending (something can still change without a job)."""
        return any(node.power in (PowerState.WAKING, PowerState.SUSPENDING) for node in self.nodes.values())

    def idle_awake_views(self) -> tuple[NodeView, ...]:
        """Views of the awake nodes without work: the only ones the sleep lever can put to sleep
        (building a view of every node each time cost 10% of a replay)."""
        return tuple(n.view() for n in self.nodes.values() if n.jobs == 0 and n.power is PowerState.AWAKE)

    def asleep_views(self) -> tuple[NodeView, ...]:
        """Views of the asleep nodes: the only ones a wake-up reaches."""
        return tuple(n.view() for n in self.nodes.values() if n.power is PowerState.ASLEEP)

    def ready_idle_gpus(self) -> int:
        """GPUs on nodes without work that are awake or waking."""
        return sum(n.gpus for n in self.nodes.values() if n.jobs == 0 and n.power in READY)

    def overdue_idle(self, now_s: float, idle_timeout_s: float) -> bool:
        """Whether an awake node has been idle past the timeout (held awake by a window, the reserve,
        waiting work or the rate limit)."""
        return any(node.power is PowerState.AWAKE and node.jobs == 0 and node.idle_since_s is not None
                   and now_s - node.idle_since_s >= idle_timeout_s for node in self.nodes.values())
