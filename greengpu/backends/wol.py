"""Waking nodes: Wake-on-LAN magic packets (`wakeonlan.wake`) and optional IPMI power-on.

Only nodes of the inventory can be woken, and only with the MAC, target address and port the
inventory gives them: a MAC that is not in the inventory is refused, so a typo in a hook argument
cannot wake (or flood) somebody else's machine. The target defaults to the inventory's
`wol_host` (255.255.255.255 unless set; set it to the subnet's broadcast address or a relay).
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import wakeonlan

from greengpu.model import Cluster, Node

log = logging.getLogger("greengpu.wake")

MAGIC_PACKET_BYTES = 102
"""6 x 0xFF, then the MAC 16 times."""


class WakeError(Exception):
    """A node cannot be woken the way the inventory describes (no MAC, no IPMI, not in the inventory)."""


@dataclass(frozen=True)
class WakeSent:
    node: str
    method: str
    """`wol` or `ipmi`."""
    target: str


class Waker:
    """Sends wake-ups for named nodes of one inventory."""

    def __init__(self, cluster: Cluster, ipmi_command: str | None = None, ipmi_timeout_s: float = 20.0) -> None:
        self._nodes = {node.name: node for node in cluster.nodes}
        self._macs = {node.mac.lower() for node in cluster.nodes if node.mac}
        self.ipmi_command = ipmi_command
        """e.g. `ipmitool -I lanplus -H {ipmi_host} -U admin -E chassis power on` ({node}, {ipmi_host})."""
        self.ipmi_timeout_s = ipmi_timeout_s

    def node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise WakeError(f"{name}: not in the inventory; only inventory nodes are woken") from None

    def wake(self, names: Iterable[str]) -> list[WakeSent]:
        """Wake each named node: IPMI when the node has a BMC and a command is configured, else WoL."""
        sent = []
        for name in names:
            node = self.node(name)
            if node.ipmi_host and self.ipmi_command:
                sent.append(self._ipmi(node))
            elif node.mac:
                sent.append(self._wol(node))
            else:
                raise WakeError(f"{name}: no MAC and no IPMI host in the inventory; it cannot be woken")
        return sent

    def _wol(self, node: Node) -> WakeSent:
        assert node.mac is not None
        self.send_magic_packets([node.mac], node.wol_host, node.wol_port)
        log.info("wake-on-LAN sent to %s (%s) via %s:%d", node.name, node.mac, node.wol_host, node.wol_port)
        return WakeSent(node.name, "wol", f"{node.wol_host}:{node.wol_port}")

    def send_magic_packets(self, macs: Sequence[str], host: str, port: int) -> None:
        """Magic packets for inventory MACs only."""
        for mac in macs:
            if mac.lower() not in self._macs:
                raise WakeError(f"MAC {mac} is not in the inventory; refusing to send a magic packet")
        wakeonlan.wake(*macs, host=host, port=port)

    def _ipmi(self, node: Node) -> WakeSent:
        assert self.ipmi_command is not None and node.ipmi_host is not None
        argv = [part.format(node=node.name, ipmi_host=node.ipmi_host) for part in shlex.split(self.ipmi_command)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=self.ipmi_timeout_s, check=False)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise WakeError(f"{node.name}: IPMI power-on failed (exit {result.returncode}): "
                            f"{detail[-1] if detail else 'no output'}")
        log.info("IPMI power-on sent to %s via %s", node.name, node.ipmi_host)
        return WakeSent(node.name, "ipmi", node.ipmi_host)
