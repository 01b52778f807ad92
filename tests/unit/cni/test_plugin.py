"""`cni.plugin.execute` end to end over the FakeNetwork: replies, codes, rollback, concurrency, GC and STATUS."""

from __future__ import annotations

import dataclasses
import errno
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cni import ipam
from cni.network import Link, Network, NetworkError, host_veth_name, veth_owner
from cni.plugin import Reply, execute
from tests.unit.cni.fakenet import FakeKernel, FakeNetwork

NETNS = "/run/netns/unit"


@pytest.fixture
def kernel() -> FakeKernel:
    k = FakeKernel()
    k.add_netns(NETNS)
    return k


def conf(tmp_path: Path, subnet: str = "198.18.7.0/24", **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "unit",
        "type": "nodeagent-bridge",
        "bridge": "naunit0",
        "isGateway": True,
        "ipam": {
            "type": "nodeagent-ipam",
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(tmp_path),
        },
    }
    doc.update(over)
    return doc


def run(kernel: FakeKernel, command: str, doc: dict[str, Any] | bytes, **env: str) -> Reply:
    environ = {"CNI_COMMAND": command, "CNI_IFNAME": "eth0", **env}
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()

    def factory() -> Network:
        return FakeNetwork(kernel)

    return execute(environ, raw, factory)


def body(reply: Reply) -> Any:
    return json.loads(reply.stdout)


def test_version_needs_nothing_but_the_command(kernel: FakeKernel) -> None:
    reply = execute({"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}', lambda: FakeNetwork(kernel))
    assert reply.status == 0
    assert body(reply) == {"cniVersion": "1.0.0", "supportedVersions": ["1.0.0", "1.1.0"]}
    assert body(execute({"CNI_COMMAND": "VERSION"}, b"", lambda: FakeNetwork(kernel)))["cniVersion"] == "1.1.0"
    assert kernel.calls == []


@pytest.mark.parametrize(
    ("env", "doc_over", "code"),
    [
        ({"CNI_CONTAINERID": "c"}, {}, 4),  # no CNI_NETNS for ADD
        ({"CNI_CONTAINERID": "c", "CNI_NETNS": NETNS}, {"cniVersion": "0.3.1"}, 1),
        ({"CNI_CONTAINERID": "c", "CNI_NETNS": NETNS}, {"ipMasq": True}, 2),
        ({"CNI_CONTAINERID": "c", "CNI_NETNS": NETNS}, {"name": ""}, 7),
        ({"CNI_CONTAINERID": "c", "CNI_NETNS": "/run/netns/none"}, {}, 4),
    ],
)
def test_errors_are_cni_error_json(
    kernel: FakeKernel, tmp_path: Path, env: dict[str, str], doc_over: dict[str, Any], code: int
) -> None:
    reply = run(kernel, "ADD", conf(tmp_path, **doc_over), **env)
    assert reply.status == 1
    err = body(reply)
    assert set(err) == {"cniVersion", "code", "msg"}
    assert err["code"] == code and err["msg"]
    assert err["cniVersion"] == doc_over.get("cniVersion", "1.0.0")
    assert not (tmp_path / "unit").exists() or not [p for p in (tmp_path / "unit").iterdir() if p.name[0].isdigit()]


def test_undecodable_stdin_is_code_6_with_the_latest_version(kernel: FakeKernel) -> None:
    reply = run(kernel, "ADD", b"\xff\xfe", CNI_CONTAINERID="c", CNI_NETNS=NETNS)
    assert body(reply) == {
        "cniVersion": "1.1.0",
        "code": 6,
        "msg": body(reply)["msg"],
    }
    assert "not JSON" in body(reply)["msg"]


def test_add_result_schema(kernel: FakeKernel, tmp_path: Path) -> None:
    reply = run(kernel, "ADD", conf(tmp_path, cniVersion="1.1.0", mtu=1450), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert reply.status == 0
    result = body(reply)
    assert set(result) == {"cniVersion", "interfaces", "ips", "routes", "dns"}
    assert result["cniVersion"] == "1.1.0"
    assert [set(i) for i in result["interfaces"]] == [
        {"name", "mac", "mtu"},
        {"name", "mac", "mtu"},
        {"name", "mac", "mtu", "sandbox"},
    ]
    assert result["interfaces"][2]["mtu"] == 1450
    assert result["ips"] == [{"address": "198.18.7.2/24", "gateway": "198.18.7.1", "interface": 2}]
    assert result["interfaces"][2]["mac"] == "0a:58:c6:12:07:02"
    assert result["interfaces"][0]["mac"] == "0a:58:c6:12:07:01"


def test_dns_and_default_gateway(kernel: FakeKernel, tmp_path: Path) -> None:
    doc = conf(tmp_path, isDefaultGateway=True, dns={"nameservers": ["198.19.0.10"], "search": ["svc.local"]})
    doc["ipam"]["routes"] = []
    result = body(run(kernel, "ADD", doc, CNI_CONTAINERID="c1", CNI_NETNS=NETNS))
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": "198.18.7.1"}]
    assert result["dns"] == {"nameservers": ["198.19.0.10"], "search": ["svc.local"]}


def test_chained_add_keeps_the_previous_result(kernel: FakeKernel, tmp_path: Path) -> None:
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "dummy"}], "ips": [], "dns": {}}
    result = body(run(kernel, "ADD", conf(tmp_path, prevResult=prev), CNI_CONTAINERID="c1", CNI_NETNS=NETNS))
    assert [i["name"] for i in result["interfaces"]] == [
        "dummy",
        "naunit0",
        host_veth_name("unit", "c1", "eth0"),
        "eth0",
    ]
    assert result["ips"][0]["interface"] == 3


def test_a_failure_after_allocation_rolls_everything_back(kernel: FakeKernel, tmp_path: Path) -> None:
    kernel.fail_configure = NetworkError("configuring eth0: Operation not permitted (errno 1)")
    reply = run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert reply.status == 1
    assert body(reply)["code"] == 102
    assert "Operation not permitted" in body(reply)["msg"]
    assert host_veth_name("unit", "c1", "eth0") not in kernel.host
    assert "eth0" not in kernel.netns[NETNS].links
    assert [p.name for p in (tmp_path / "unit").iterdir() if p.name[0].isdigit()] == []


def test_an_unexpected_exception_is_an_internal_error(kernel: FakeKernel, tmp_path: Path) -> None:
    kernel.fail_configure = KeyError("boom")
    reply = run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert (reply.status, body(reply)["code"]) == (1, 999)
    assert "KeyError" in body(reply)["msg"]


def test_check_needs_prev_result(kernel: FakeKernel, tmp_path: Path) -> None:
    run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    reply = run(kernel, "CHECK", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert body(reply)["code"] == 7 and "prevResult" in body(reply)["msg"]


def test_check_notices_a_released_address_and_a_detached_veth(kernel: FakeKernel, tmp_path: Path) -> None:
    doc = conf(tmp_path)
    result = body(run(kernel, "ADD", doc, CNI_CONTAINERID="c1", CNI_NETNS=NETNS))
    (tmp_path / "unit" / "198.18.7.2").unlink()
    reply = run(kernel, "CHECK", {**doc, "prevResult": result}, CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert body(reply)["code"] == 101 and "IPAM holds nothing" in body(reply)["msg"]
    (tmp_path / "unit" / "198.18.7.2").write_text("c1\neth0\n")
    veth = host_veth_name("unit", "c1", "eth0")
    kernel.host[veth] = dataclasses.replace(kernel.host[veth], master=None)
    reply = run(kernel, "CHECK", {**doc, "prevResult": result}, CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    assert body(reply)["code"] == 101 and "not attached to bridge naunit0" in body(reply)["msg"]


def test_fifty_concurrent_adds_get_fifty_addresses(kernel: FakeKernel, tmp_path: Path) -> None:
    doc = conf(tmp_path)
    for i in range(50):
        kernel.add_netns(f"/run/netns/p{i}")
    results: dict[int, Reply] = {}
    barrier = threading.Barrier(50)

    def one(i: int) -> None:
        barrier.wait()
        results[i] = run(kernel, "ADD", doc, CNI_CONTAINERID=f"pod{i}", CNI_NETNS=f"/run/netns/p{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status == 0 for r in results.values())
    addresses = {body(r)["ips"][0]["address"] for r in results.values()}
    assert len(addresses) == 50
    assert len([p for p in kernel.host.values() if p.kind == "veth"]) == 50


def test_status_reports_exhaustion_as_50(kernel: FakeKernel, tmp_path: Path) -> None:
    doc = conf(tmp_path, subnet="198.18.7.0/30", cniVersion="1.1.0")
    assert run(kernel, "STATUS", doc) == Reply(0, b"")
    assert run(kernel, "ADD", doc, CNI_CONTAINERID="c1", CNI_NETNS=NETNS).status == 0
    reply = run(kernel, "STATUS", doc)
    assert body(reply)["code"] == 50 and "is full" in body(reply)["msg"]
    kernel.add_netns("/run/netns/other")
    reply = run(kernel, "ADD", doc, CNI_CONTAINERID="c2", CNI_NETNS="/run/netns/other")
    assert body(reply)["code"] == 100 and "no free address" in body(reply)["msg"]


def test_the_network_is_closed_after_every_call(tmp_path: Path, kernel: FakeKernel) -> None:
    made: list[FakeNetwork] = []

    def factory() -> Network:
        made.append(FakeNetwork(kernel))
        return made[-1]

    execute(
        {"CNI_COMMAND": "ADD", "CNI_IFNAME": "eth0", "CNI_CONTAINERID": "c", "CNI_NETNS": NETNS},
        json.dumps(conf(tmp_path)).encode(),
        factory,
    )
    assert made and all(n.closed for n in made)


def _allocated(tmp_path: Path, network: str = "unit") -> list[str]:
    d = tmp_path / network
    return sorted(p.name for p in d.iterdir() if p.name[0].isdigit()) if d.exists() else []


def test_netlink_errors_carry_operation_and_errno_in_details(kernel: FakeKernel, tmp_path: Path) -> None:
    kernel.fail_configure = NetworkError(
        "configuring interface 3 in /run/netns/unit: Operation not permitted (errno 1)",
        operation="configuring interface 3 in /run/netns/unit",
        errno=errno.EPERM,
    )
    err = body(run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS))
    assert err["code"] == 102
    assert err["details"] == "operation: configuring interface 3 in /run/netns/unit; errno: EPERM (1)"


def test_an_unusable_data_dir_is_code_5_before_anything_is_touched(kernel: FakeKernel, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    doc = conf(tmp_path)
    doc["ipam"]["dataDir"] = str(tmp_path / "file" / "ipam")  # a regular file where a directory must be
    reply = run(kernel, "ADD", doc, CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    err = body(reply)
    assert (reply.status, err["code"]) == (1, 5)
    assert "cannot open the IPAM lock" in err["msg"] and "check ipam.dataDir" in err["msg"]
    assert "errno: ENOTDIR" in err["details"] and "operation: opening the IPAM lock" in err["details"]
    assert kernel.calls == []
    # DEL needs the store too: the same code, not success over state it could not read.
    assert body(run(kernel, "DEL", doc, CNI_CONTAINERID="c1", CNI_NETNS=NETNS))["code"] == 5


def test_a_held_ipam_lock_is_code_11(kernel: FakeKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipam, "LOCK_TIMEOUT", 0.0)  # give up at the first refusal: no waiting in a unit test
    with ipam.Store(tmp_path, "unit").lock():
        reply = run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS)
    err = body(reply)
    assert (reply.status, err["code"]) == (1, 11)
    assert "held by another process" in err["msg"]
    assert "taking the IPAM lock" in err["details"]
    assert kernel.calls == []
    assert run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS).status == 0  # lock free again


def _gc(tmp_path: Path, valid: list[dict[str, str]] | None) -> dict[str, Any]:
    doc = conf(tmp_path, cniVersion="1.1.0")
    if valid is not None:
        doc["cni.dev/valid-attachments"] = valid
    return doc


def test_gc_without_valid_attachments_is_refused_and_deletes_nothing(kernel: FakeKernel, tmp_path: Path) -> None:
    assert run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="c1", CNI_NETNS=NETNS).status == 0
    veth = host_veth_name("unit", "c1", "eth0")
    reply = run(kernel, "GC", _gc(tmp_path, None))
    err = body(reply)
    assert (reply.status, err["code"]) == (1, 7)
    assert "cni.dev/valid-attachments" in err["msg"] and "nothing is deleted" in err["msg"]
    assert _allocated(tmp_path) == ["198.18.7.2"]
    assert veth in kernel.host and "eth0" in kernel.netns[NETNS].links
    assert "delete_host_link" not in kernel.calls
    # libcni sends the list under both names; the older one alone is read too.
    legacy = {**conf(tmp_path, cniVersion="1.1.0"), "cni.dev/attachments": [{"containerID": "c1", "ifname": "eth0"}]}
    assert run(kernel, "GC", legacy) == Reply(0, b"")
    assert _allocated(tmp_path) == ["198.18.7.2"] and veth in kernel.host


def test_gc_removes_only_veths_this_network_made(kernel: FakeKernel, tmp_path: Path) -> None:
    assert run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="keep", CNI_NETNS=NETNS).status == 0
    kernel.add_netns("/run/netns/gone")
    assert run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID="stale", CNI_NETNS="/run/netns/gone").status == 0
    bridge = kernel.host["naunit0"]

    def port(name: str, alias: str) -> None:
        kernel.host[name] = Link(name, kernel.next_index(), "veth", kernel.next_mac(), 1500, True, bridge.index)
        kernel.host[name] = dataclasses.replace(kernel.host[name], alias=alias)

    port(host_veth_name("unit", "orphan", "eth0"), veth_owner("unit"))  # ours, its allocation already lost
    port(host_veth_name("other", "pod", "eth0"), veth_owner("other"))  # another network on the same bridge
    port(host_veth_name("old", "pod", "eth0"), "")  # our naming, no alias: nothing says whose it is
    reply = run(kernel, "GC", _gc(tmp_path, [{"containerID": "keep", "ifname": "eth0"}]))
    assert reply == Reply(0, b"")
    assert _allocated(tmp_path) == ["198.18.7.2"]
    assert sorted(n for n, link in kernel.host.items() if link.kind == "veth") == sorted(
        [
            host_veth_name("unit", "keep", "eth0"),
            host_veth_name("other", "pod", "eth0"),
            host_veth_name("old", "pod", "eth0"),
        ]
    )


def test_gc_maps_netlink_errors_and_keeps_the_address_of_a_veth_it_could_not_delete(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    for i in range(3):
        kernel.add_netns(f"/run/netns/g{i}")
        assert run(kernel, "ADD", conf(tmp_path), CNI_CONTAINERID=f"g{i}", CNI_NETNS=f"/run/netns/g{i}").status == 0
    stuck = host_veth_name("unit", "g1", "eth0")
    kernel.fail_delete[stuck] = NetworkError(
        f"deleting {stuck}: Device or resource busy (errno 16)", operation=f"deleting {stuck}", errno=errno.EBUSY
    )
    reply = run(kernel, "GC", _gc(tmp_path, []))
    err = body(reply)
    assert (reply.status, err["code"]) == (1, 102)  # the netlink mapping, not 999
    assert "1 operation(s) failed" in err["msg"] and "Device or resource busy" in err["msg"]
    assert "errno: EBUSY (16)" in err["details"]
    # The other two went; g1 keeps its veth and its address, so the address is not handed out under it.
    assert [n for n, link in kernel.host.items() if link.kind == "veth"] == [stuck]
    assert [p.read_text().split()[0] for p in (tmp_path / "unit").iterdir() if p.name[0].isdigit()] == ["g1"]
