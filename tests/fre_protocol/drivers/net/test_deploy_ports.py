"""A local deployment's ports: distinct within one deployment.

Chosen one at a time, two services could be given the same free port; the second then fails to
bind while the first answers its readiness check, and the round hangs (seen once in CI). All of a
deployment's ports are held bound together until every one is chosen.
"""

from __future__ import annotations

import socket

from fre_protocol.drivers.net.deploy import free_ports


def test_the_ports_of_one_draw_are_distinct_and_free() -> None:
    for _ in range(20):
        ports = free_ports(64)
        assert len(set(ports)) == 64
    for port in free_ports(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # released again: a service can take it
