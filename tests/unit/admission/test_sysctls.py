"""Sysctl admission by table: names and namespaces, the safe list per kernel, allowlist entries upstream refuses, and
pods admitted or refused with reason SysctlForbidden and upstream's message, before any other predicate."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.admission import SYSCTL_FORBIDDEN, AdmitResult, admit, new_allowlist
from nodeagent.admission.sysctls import (
    SAFE_SYSCTLS,
    Namespace,
    kernel_release,
    namespace_of,
    normalize_name,
    pattern_problem,
    safe_sysctls,
)

KERNEL = (6, 1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("net.ipv4.ip_local_port_range", "net.ipv4.ip_local_port_range"),
        ("net/ipv4/ip_local_port_range", "net.ipv4.ip_local_port_range"),
        ("net/ipv4/conf/eno2.100/rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),  # a dot inside a segment
        ("net.ipv4.conf.eno2/100.rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),  # already dotted: kept
        ("kernel", "kernel"),
        ("", ""),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert normalize_name(name) == expected


@pytest.mark.parametrize(
    ("name", "namespace"),
    [
        ("kernel.sem", Namespace.IPC),
        ("kernel.msgmax", Namespace.IPC),
        ("kernel.msg", Namespace.IPC),
        ("kernel.shm_rmid_forced", Namespace.IPC),
        ("fs.mqueue.msg_max", Namespace.IPC),
        ("net.core.somaxconn", Namespace.NET),
        ("net.ipv4.tcp_syncookies", Namespace.NET),
        ("network.x", None),  # a prefix counts only followed by a dot
        ("kernel.msgfoo", None),  # whole names, not prefixes
        ("vm.swappiness", None),
        ("kernel.pid_max", None),
    ],
)
def test_namespace_of(name: str, namespace: Namespace | None) -> None:
    assert namespace_of(name) is namespace


def test_safe_sysctls_follow_the_kernel() -> None:
    everything = tuple(name for name, _ in SAFE_SYSCTLS)
    assert safe_sysctls((6, 1)) == everything
    assert safe_sysctls((4, 14)) == tuple(n for n in everything if n not in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"))
    assert "net.ipv4.tcp_fin_timeout" not in safe_sysctls((4, 5))
    assert "net.ipv4.tcp_keepalive_time" in safe_sysctls((4, 5))
    # An unknown kernel keeps only what needs no particular release, as upstream.
    assert safe_sysctls(None) == (
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    )


@pytest.mark.parametrize(
    ("release", "expected"),
    [("6.1.0-18-amd64", (6, 1)), ("4.15.0", (4, 15)), ("5.10", (5, 10)), ("weird", None)],
)
def test_kernel_release(release: str, expected: tuple[int, int] | None) -> None:
    assert kernel_release(release) == expected


REGEX = r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("kernel.msg*", None),
        ("kernel.shm*", None),
        ("kernel.sem", None),
        ("net.*", None),
        ("net/ipv4/*", None),
        ("fs.mqueue.*", None),
        ("net.core.somaxconn", None),
        ("vm.swappiness", 'the sysctls "vm.swappiness" are not known to be namespaced'),
        ("kernel.*", 'the sysctls "kernel." are not known to be namespaced'),
        ("*", 'the sysctls "" are not known to be namespaced'),
        ("Net.core", f'sysctl "Net.core" must have at most 253 characters and match regex {REGEX}'),
        ("net..core", f'sysctl "net..core" must have at most 253 characters and match regex {REGEX}'),
        ("net.core.", f'sysctl "net.core." must have at most 253 characters and match regex {REGEX}'),
        ("net." + "a" * 250, f'sysctl "net.{"a" * 250}" must have at most 253 characters and match regex {REGEX}'),
    ],
)
def test_pattern_problem(pattern: str, problem: str | None) -> None:
    assert pattern_problem(pattern) == problem


def test_new_allowlist_refuses_what_upstream_refuses() -> None:
    with pytest.raises(ValueError, match=r'"vm\.swappiness" are not known to be namespaced'):
        new_allowlist(["vm.swappiness"], kernel=KERNEL)


def _pod(*names: str, host_network: bool = False, host_ipc: bool = False, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}], **spec}
    if names:
        body["securityContext"] = {"sysctls": [{"name": n, "value": "1"} for n in names]}
    if host_network:
        body["hostNetwork"] = True
    if host_ipc:
        body["hostIPC"] = True
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": body}


def _refused(message: str) -> AdmitResult:
    return AdmitResult(admit=False, reason="SysctlForbidden", message=message)


OK = AdmitResult(admit=True)


@pytest.mark.parametrize(
    ("allowed", "the_pod", "expected"),
    [
        ((), _pod(), OK),
        ((), _pod("net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"), OK),
        ((), _pod("net/ipv4/ip_local_port_range"), OK),  # slashes work as dots
        ((), _pod("kernel.msgmax"), _refused('forbidden sysctl: "kernel.msgmax" not allowlisted')),
        # The first one refused is reported.
        (
            (),
            _pod("net.ipv4.tcp_syncookies", "net.core.somaxconn", "kernel.msgmax"),
            _refused('forbidden sysctl: "net.core.somaxconn" not allowlisted'),
        ),
        (("kernel.msg*",), _pod("kernel.msgmax", "kernel.msgmnb"), OK),
        (("kernel.msgmax",), _pod("kernel.msgmnb"), _refused('forbidden sysctl: "kernel.msgmnb" not allowlisted')),
        (("net.core.somaxconn",), _pod("net.core.somaxconn"), OK),
        (("net.*",), _pod("net.core.somaxconn", "net.ipv4.tcp_rmem"), OK),
        # A host network or IPC namespace shares the node's: its sysctls are not the pod's to set.
        (
            (),
            _pod("net.ipv4.ip_local_port_range", host_network=True),
            _refused('forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host Net enabled'),
        ),
        (
            ("net.*",),
            _pod("net.core.somaxconn", host_network=True),
            _refused('forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled'),
        ),
        (
            (),
            _pod("kernel.shm_rmid_forced", host_ipc=True),
            _refused('forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled'),
        ),
        ((), _pod("kernel.shm_rmid_forced", host_network=True), OK),
        ((), _pod("net.ipv4.tcp_syncookies", host_ipc=True), OK),
    ],
    ids=[
        "no-sysctls",
        "safe-ones",
        "slash-separated",
        "unsafe-msgmax",
        "first-refused",
        "allowed-by-pattern",
        "pattern-is-not-implied",
        "allowed-by-name",
        "allowed-net-prefix",
        "safe-net-in-host-network",
        "allowed-net-in-host-network",
        "ipc-in-host-ipc",
        "ipc-in-host-network",
        "net-in-host-ipc",
    ],
)
def test_admit_sysctls(allowed: tuple[str, ...], the_pod: dict[str, Any], expected: AdmitResult) -> None:
    allowlist = new_allowlist(allowed, kernel=KERNEL)
    assert admit(the_pod, None, [], sysctls=allowlist) == expected  # no Node needed (standalone)


def test_sysctls_come_before_the_general_predicates() -> None:
    node = {"metadata": {"name": "n1", "labels": {}}, "status": {"allocatable": {"pods": "0"}}}
    the_pod = _pod("kernel.msgmax")
    allowlist = new_allowlist((), kernel=KERNEL)
    assert admit(the_pod, node, [], sysctls=allowlist).reason == SYSCTL_FORBIDDEN
    assert admit(the_pod, node, []).reason == "OutOfpods"  # without the allowlist, the predicates decide
    assert admit(_pod("net.ipv4.tcp_syncookies"), node, [], sysctls=allowlist).reason == "OutOfpods"
