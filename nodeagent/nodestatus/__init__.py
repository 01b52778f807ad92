"""The Node as the kubelet reports it: labels, capacity and allocatable, conditions, status, registration, lease.

All pure except `facts.gather_node_facts`, which reads the machine.
"""

from nodeagent.nodestatus.conditions import DISK_PRESSURE, MEMORY_PRESSURE, PID_PRESSURE, READY, node_conditions
from nodeagent.nodestatus.facts import NodeFacts, gather_node_facts
from nodeagent.nodestatus.labels import node_labels
from nodeagent.nodestatus.node import build_node_status, initial_node
from nodeagent.nodestatus.report import NODE_LEASE_NAMESPACE, lease_object, node_status_changed, should_report
from nodeagent.nodestatus.resources import allocatable, capacity

__all__ = [
    "DISK_PRESSURE",
    "MEMORY_PRESSURE",
    "NODE_LEASE_NAMESPACE",
    "PID_PRESSURE",
    "READY",
    "NodeFacts",
    "allocatable",
    "build_node_status",
    "capacity",
    "gather_node_facts",
    "initial_node",
    "lease_object",
    "node_conditions",
    "node_labels",
    "node_status_changed",
    "should_report",
]
