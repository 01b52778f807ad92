"""The testbed's agent gets upstream's kubelet port on its own node address unless something holds it there."""

from __future__ import annotations

import socket

from nodeagent.testbed.testbed import KUBELET_PORT, kubelet_api_port

# A loopback address of its own: a testbed's node address is likewise one address nobody else binds.
NODE_IP = "127.0.0.77"


def test_upstream_port_when_free_on_the_node_address() -> None:
    assert kubelet_api_port(NODE_IP, fallback=41234) == KUBELET_PORT == 10250


def test_fallback_when_a_listener_holds_it() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds: past any TIME_WAIT
        holder.bind((NODE_IP, KUBELET_PORT))
        holder.listen()
        assert kubelet_api_port(NODE_IP, fallback=41234) == 41234
    assert kubelet_api_port(NODE_IP, fallback=41234) == KUBELET_PORT


def test_connections_left_in_time_wait_do_not_hold_it() -> None:
    # A testbed brought down and up again in the same directory gets the same node address, and the previous agent's
    # closed connections on NODE:10250 linger in TIME_WAIT; the agent's server would still bind (SO_REUSEADDR).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((NODE_IP, KUBELET_PORT))
        server.listen()
        client = socket.create_connection((NODE_IP, KUBELET_PORT))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.close()
    assert kubelet_api_port(NODE_IP, fallback=41234) == KUBELET_PORT
