"""A private test network of Linux network namespaces, and partitions made with nftables.

The test builds it and removes it; nothing else on the machine is touched but one veth in
the root namespace, and traffic only goes between the addresses made here::

      root namespace (pytest, clients)          hub namespace
      r<id> 10.213.<n>.1 ──────────────────▶ ┌──────── bridge ────────┐
                                            │    │        │        │
                                         node 0   node 1   node 2  ...   one namespace
                                        .10      .11      .12            each, a veth
                                                                         into the bridge

A process is started in a node with :meth:`TestNetwork.command` (``ip netns exec``).
:meth:`TestNetwork.isolate` puts an nftables table into one node's namespace that drops
every packet to or from the other nodes (both directions); the root namespace still
reaches it, as clients outside a partition would. :meth:`TestNetwork.heal` deletes the
table. Drops take effect at once, for established TCP connections too: their packets
are lost and the peers find out only through their own timeouts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType
from typing import Self

NFT_TABLE = "sluice_test_partition"
BRIDGE = "sw0"
COMMAND_TIMEOUT_S = 10.0
SUBNET_CANDIDATES = [f"10.213.{third}.0/24" for third in range(10, 250)]
"""Private subnets to choose from; the first that no route of the machine overlaps."""
NODE_HOST_OFFSET = 10
"""Node i gets the subnet's address 10 + i; the root namespace's veth gets .1."""


def unavailable_reason() -> str | None:
    """Why this machine cannot build a test network, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root, as CI does)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (make install adds iproute2 and nftables)"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)


def _free_subnet() -> ipaddress.IPv4Network:
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"],
        check=True,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    ).stdout
    taken = []
    for line in routes.splitlines():
        first = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            if first not in ("default", "local", "broadcast"):
                taken.append(ipaddress.ip_network(first, strict=False))
    # Start where this process's id points: two test processes building networks at the
    # same moment (the suite runs on several workers) look at different subnets first.
    start = os.getpid() % len(SUBNET_CANDIDATES)
    for candidate in SUBNET_CANDIDATES[start:] + SUBNET_CANDIDATES[:start]:
        subnet = ipaddress.ip_network(candidate)
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise RuntimeError("no free private subnet for the test network")


class TestNetwork:
    """``nodes`` namespaces on one bridge, reachable from the root namespace."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, nodes: int) -> None:
        self.prefix = f"sl{os.getpid() % 100_000}"
        """Names of everything made here start with it (interface names stay ≤ 15)."""
        self.nodes = nodes
        self._subnet: ipaddress.IPv4Network | None = None
        self._isolated: set[int] = set()

    # ── names and addresses ────────────────────────────────────────────────────────

    @property
    def hub(self) -> str:
        return f"{self.prefix}hub"

    def namespace(self, node: int) -> str:
        return f"{self.prefix}n{node}"

    def address(self, node: int) -> str:
        assert self._subnet is not None, "the network is not built"
        return str(self._subnet.network_address + NODE_HOST_OFFSET + node)

    @property
    def root_address(self) -> str:
        assert self._subnet is not None, "the network is not built"
        return str(self._subnet.network_address + 1)

    def command(self, node: int) -> list[str]:
        """The prefix that runs a command inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node)]

    # ── building and removing ──────────────────────────────────────────────────────

    def build(self) -> None:
        self.remove()  # whatever a crashed run with this prefix left
        self._subnet = subnet = _free_subnet()
        length = subnet.prefixlen
        _run("ip", "netns", "add", self.hub)
        hub = ["ip", "netns", "exec", self.hub]
        _run(*hub, "ip", "link", "add", "name", BRIDGE, "type", "bridge")
        _run(*hub, "ip", "link", "set", BRIDGE, "up")
        for node in range(self.nodes):
            namespace = self.namespace(node)
            inside, outside = f"{self.prefix}v{node}", f"{self.prefix}h{node}"
            _run("ip", "netns", "add", namespace)
            _run("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
            _run("ip", "link", "set", inside, "netns", namespace)
            _run("ip", "link", "set", outside, "netns", self.hub)
            _run(*hub, "ip", "link", "set", outside, "master", BRIDGE, "up")
            node_ip = ["ip", "netns", "exec", namespace, "ip"]
            _run(*node_ip, "addr", "add", f"{self.address(node)}/{length}", "dev", inside)
            _run(*node_ip, "link", "set", inside, "up")
            _run(*node_ip, "link", "set", "lo", "up")
        root, root_peer = f"{self.prefix}r", f"{self.prefix}hr"
        _run("ip", "link", "add", root, "type", "veth", "peer", "name", root_peer)
        _run("ip", "link", "set", root_peer, "netns", self.hub)
        _run(*hub, "ip", "link", "set", root_peer, "master", BRIDGE, "up")
        _run("ip", "addr", "add", f"{self.root_address}/{length}", "dev", root)
        _run("ip", "link", "set", root, "up")

    def remove(self) -> None:
        """Delete every namespace and link of this prefix (never raises)."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                ["ip", "link", "del", f"{self.prefix}r"],
                check=False,
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        listed = subprocess.run(
            ["ip", "netns", "list"],
            check=False,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        ).stdout
        for line in listed.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(self.prefix):
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run(
                        ["ip", "netns", "del", name],
                        check=False,
                        capture_output=True,
                        timeout=COMMAND_TIMEOUT_S,
                    )

    def __enter__(self) -> Self:
        try:
            self.build()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.remove()

    # ── partitions ─────────────────────────────────────────────────────────────────

    def isolate(self, node: int, from_nodes: Sequence[int] | None = None) -> None:
        """Drop every packet between ``node`` and the others (or ``from_nodes``)."""
        others = [n for n in (from_nodes or range(self.nodes)) if n != node]
        addresses = ", ".join(self.address(n) for n in others)
        rules = (
            f"table inet {NFT_TABLE} {{\n"
            f"  chain input {{ type filter hook input priority 0; "
            f"ip saddr {{ {addresses} }} drop; }}\n"
            f"  chain output {{ type filter hook output priority 0; "
            f"ip daddr {{ {addresses} }} drop; }}\n"
            "}\n"
        )
        subprocess.run(
            [*self.command(node), "nft", "-f", "-"],
            input=rules,
            text=True,
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        self._isolated.add(node)

    def heal(self) -> None:
        """Remove every partition."""
        for node in sorted(self._isolated):
            _run(*self.command(node), "nft", "delete", "table", "inet", NFT_TABLE)
        self._isolated.clear()
