"""Wake-on-LAN with real UDP packets on loopback, and IPMI power-on through a real command."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory

from greengpu.backends.wol import MAGIC_PACKET_BYTES, WakeError, Waker
from greengpu.config.inventory import load_cluster


def cluster_file(tmp_path: Path, port: int) -> Path:
    return write_inventory(tmp_path / "cluster.yaml", {"a100x8": a100_type()},
                           [wol_node("gpu[01-03]", "a100x8", "02:00:5e:10:00:0a", port),
                            "{name: bmc01, type: a100x8, ipmi_host: 127.0.0.9}"])


def test_magic_packet_arrives_byte_for_byte(tmp_path: Path, udp: socket.socket) -> None:
    port = udp.getsockname()[1]
    waker = Waker(load_cluster(cluster_file(tmp_path, port)))
    sent = waker.wake(["gpu02", "gpu03"])
    assert [(s.node, s.method, s.target) for s in sent] == [
        ("gpu02", "wol", f"127.0.0.1:{port}"), ("gpu03", "wol", f"127.0.0.1:{port}")]
    for mac in (bytes.fromhex("02005e10000b"), bytes.fromhex("02005e10000c")):  # +1 per node of the range
        packet, (sender, _) = udp.recvfrom(4096)
        assert sender == "127.0.0.1"
        assert len(packet) == MAGIC_PACKET_BYTES == 102
        assert packet[:6] == b"\xff" * 6
        for repeat in range(16):
            assert packet[6 + 6 * repeat: 12 + 6 * repeat] == mac, f"MAC copy {repeat}"


def test_only_inventory_macs_and_nodes(tmp_path: Path, udp: socket.socket) -> None:
    port = udp.getsockname()[1]
    waker = Waker(load_cluster(cluster_file(tmp_path, port)))
    with pytest.raises(WakeError, match="not in the inventory"):
        waker.send_magic_packets(["02:00:5e:10:00:ff"], "127.0.0.1", port)
    with pytest.raises(WakeError, match="gpu99: not in the inventory"):
        waker.wake(["gpu99"])
    with pytest.raises(WakeError, match="bmc01: no MAC and no IPMI host"):
        Waker(load_cluster(cluster_file(tmp_path, port))).wake(["bmc01"])
    udp.settimeout(0.2)
    with pytest.raises(TimeoutError):
        udp.recvfrom(4096)  # nothing was sent


def test_ipmi_power_on_runs_the_configured_command(tmp_path: Path) -> None:
    record = tmp_path / "ipmi.log"
    script = tmp_path / "fake_ipmitool.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')\n")
    template = f"{sys.executable} {script} {record} -I lanplus -H {{ipmi_host}} chassis power on # {{node}}"
    waker = Waker(load_cluster(cluster_file(tmp_path, 9)), ipmi_command=template)
    [sent] = waker.wake(["bmc01"])
    assert (sent.method, sent.target) == ("ipmi", "127.0.0.9")
    assert record.read_text() == "-I lanplus -H 127.0.0.9 chassis power on # bmc01\n"
    failing = Waker(load_cluster(cluster_file(tmp_path, 9)),
                    ipmi_command=f"{sys.executable} -c \"import sys; sys.exit('Unable to establish IPMI v2')\"")
    with pytest.raises(WakeError, match=r"bmc01: IPMI power-on failed \(exit 1\): Unable to establish IPMI v2"):
        failing.wake(["bmc01"])
