"""nodeagent-ipam: order of allocation, release, exhaustion, persistence across processes, concurrency."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from cni import ipam
from cni.config import IPAMConfig, Range, parse_ipam
from cni.errors import CNIError, Code

IP = ipaddress.IPv4Address
REPO = Path(__file__).resolve().parents[3]


def _range(subnet: str, start: str | None = None, end: str | None = None, gateway: str | None = None) -> Range:
    net = ipaddress.IPv4Network(subnet)
    return Range(
        subnet=net,
        start=IP(start) if start else net.network_address + 1,
        end=IP(end) if end else net.broadcast_address - 1,
        gateway=IP(gateway) if gateway else net.network_address + 1,
    )


def _config(data_dir: Path, subnet: str = "198.18.7.0/24", **extra: object) -> IPAMConfig:
    return parse_ipam({"ranges": [[{"subnet": subnet}]], "dataDir": str(data_dir), **extra})


@pytest.mark.parametrize(
    ("ranges", "last", "expected"),
    [
        # /29: .1 is the gateway, so .2-.6; from the start when nothing was handed out yet.
        ([_range("198.18.7.0/29")], None, ["2", "3", "4", "5", "6"]),
        # Round-robin: after .4 comes .5, wrapping round to .2, .3, .4.
        ([_range("198.18.7.0/29")], "198.18.7.4", ["5", "6", "2", "3", "4"]),
        # The last address of the range wraps to the first.
        ([_range("198.18.7.0/29")], "198.18.7.6", ["2", "3", "4", "5", "6"]),
        # A last address the ranges no longer hold: from the start.
        ([_range("198.18.7.0/29")], "198.18.9.9", ["2", "3", "4", "5", "6"]),
        # A gateway in the middle is skipped.
        ([_range("198.18.7.0/29", gateway="198.18.7.4")], None, ["1", "2", "3", "5", "6"]),
        # rangeStart/rangeEnd bound it.
        ([_range("198.18.7.0/24", "198.18.7.10", "198.18.7.12")], None, ["10", "11", "12"]),
        # Two ranges: the second follows the first; round-robin continues across them.
        (
            [_range("198.18.7.0/30"), _range("198.18.8.0/30")],
            "198.18.7.2",
            ["8.2", "7.2"],
        ),
    ],
)
def test_candidates_order(ranges: list[Range], last: str | None, expected: list[str]) -> None:
    got = [str(ip) for ip, _ in ipam.candidates(tuple(ranges), IP(last) if last else None)]
    prefix = "198.18." if "." in expected[0] else "198.18.7."
    assert got == [prefix + e for e in expected]


def test_allocate_release_and_round_robin(tmp_path: Path) -> None:
    config = _config(tmp_path)
    store = ipam.Store(tmp_path, "pods")
    a = ipam.allocate(store, config, ipam.Owner("a", "eth0"))
    b = ipam.allocate(store, config, ipam.Owner("b", "eth0"))
    assert [x.ip for x in a + b] == [IP("198.18.7.2"), IP("198.18.7.3")]
    assert (tmp_path / "pods" / "198.18.7.2").read_text() == "a\neth0\n"
    assert ipam.release(store, ipam.Owner("a", "eth0")) == [IP("198.18.7.2")]
    assert ipam.release(store, ipam.Owner("a", "eth0")) == []  # idempotent
    # Round-robin: .2 was just freed, the next pod gets .4, not .2.
    assert ipam.allocate(store, config, ipam.Owner("c", "eth0"))[0].ip == IP("198.18.7.4")


def test_a_repeated_add_gets_its_address_back(tmp_path: Path) -> None:
    config = _config(tmp_path)
    store = ipam.Store(tmp_path, "pods")
    first = ipam.allocate(store, config, ipam.Owner("a", "eth0"))
    again = ipam.allocate(store, config, ipam.Owner("a", "eth0"))
    assert [(a.ip, a.range, a.range_set) for a in again] == [(a.ip, a.range, a.range_set) for a in first]
    assert [a.reused for a in first] == [False] and [a.reused for a in again] == [True]
    assert ipam.allocate(store, config, ipam.Owner("a", "net1"))[0].ip != first[0].ip  # another interface


def test_reserved_addresses_are_never_handed_out(tmp_path: Path) -> None:
    config = _config(tmp_path, "198.18.7.0/29", reserved=["198.18.7.2", "198.18.7.4/31"])
    store = ipam.Store(tmp_path, "pods")
    got = [ipam.allocate(store, config, ipam.Owner(f"c{i}", "eth0"))[0].ip for i in range(2)]
    assert got == [IP("198.18.7.3"), IP("198.18.7.6")]


def test_exhaustion_is_a_clear_error_and_takes_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path, "198.18.7.0/30")  # .1 gateway, .2 the only pod address
    store = ipam.Store(tmp_path, "pods")
    ipam.allocate(store, config, ipam.Owner("a", "eth0"))
    with pytest.raises(CNIError) as info:
        ipam.allocate(store, config, ipam.Owner("b", "eth0"))
    assert info.value.code is Code.ADDRESSES_EXHAUSTED
    assert "no free address in range set 198.18.7.0/30" in info.value.msg
    assert "1 held by pods" in info.value.msg
    assert sorted(p.name for p in (tmp_path / "pods").iterdir() if p.name[0].isdigit()) == ["198.18.7.2"]


def test_exhaustion_of_a_second_range_set_gives_back_the_first(tmp_path: Path) -> None:
    config = parse_ipam(
        {"ranges": [[{"subnet": "198.18.7.0/24"}], [{"subnet": "198.18.8.0/30"}]], "dataDir": str(tmp_path)}
    )
    store = ipam.Store(tmp_path, "pods")
    assert len(ipam.allocate(store, config, ipam.Owner("a", "eth0"))) == 2
    with pytest.raises(CNIError):
        ipam.allocate(store, config, ipam.Owner("b", "eth0"))
    assert sorted(store.allocations()) == [IP("198.18.7.2"), IP("198.18.8.2")]


def test_gc_frees_what_no_valid_attachment_owns(tmp_path: Path) -> None:
    config = _config(tmp_path)
    store = ipam.Store(tmp_path, "pods")
    for name in ("a", "b", "c"):
        ipam.allocate(store, config, ipam.Owner(name, "eth0"))
    stale = ipam.garbage_collect(store, [ipam.Owner("b", "eth0")])
    assert sorted(o.container_id for _, o in stale) == ["a", "c"]
    assert list(store.allocations().values()) == [ipam.Owner("b", "eth0")]


def test_lock_held_too_long_is_try_again_later(tmp_path: Path) -> None:
    ticks = iter(float(t) for t in range(100))
    store = ipam.Store(tmp_path, "pods", monotonic=lambda: next(ticks))
    holder = ipam.Store(tmp_path, "pods")
    with holder.lock(), pytest.raises(CNIError) as info, store.lock(timeout=3):
        pass
    assert info.value.code is Code.TRY_AGAIN_LATER
    assert "held by another process" in info.value.msg


_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    from cni import ipam
    from cni.config import parse_ipam
    config = parse_ipam({{"ranges": [[{{"subnet": "198.18.7.0/24"}}]], "dataDir": {data!r}}})
    store = ipam.Store(config.data_dir, "pods")
    action, name = sys.argv[1], sys.argv[2]
    owner = ipam.Owner(name, "eth0")
    if action == "add":
        print(json.dumps([str(a.ip) for a in ipam.allocate(store, config, owner)]))
    else:
        print(json.dumps([str(ip) for ip in ipam.release(store, owner)]))
    """
)


def _child(tmp_path: Path, action: str, name: str) -> subprocess.Popen[str]:
    code = _CHILD.format(repo=str(REPO), data=str(tmp_path))
    return subprocess.Popen([sys.executable, "-c", code, action, name], stdout=subprocess.PIPE, text=True)


def test_allocations_persist_across_processes(tmp_path: Path) -> None:
    added = _child(tmp_path, "add", "one")
    out, _ = added.communicate(timeout=60)
    (ip,) = json.loads(out)
    store = ipam.Store(tmp_path, "pods")
    assert store.allocations() == {IP(ip): ipam.Owner("one", "eth0")}
    # Another process sees it taken, and a third frees it.
    second = _child(tmp_path, "add", "two")
    assert json.loads(second.communicate(timeout=60)[0]) != [ip]
    freed = _child(tmp_path, "del", "one")
    assert json.loads(freed.communicate(timeout=60)[0]) == [ip]
    assert ipam.Owner("one", "eth0") not in store.allocations().values()


def test_fifty_concurrent_processes_never_share_an_address(tmp_path: Path) -> None:
    procs = [_child(tmp_path, "add", f"p{i}") for i in range(50)]
    got = [json.loads(p.communicate(timeout=120)[0])[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(got)) == 50
    assert len(ipam.Store(tmp_path, "pods").allocations()) == 50


def test_fifty_concurrent_threads_never_share_an_address(tmp_path: Path) -> None:
    config = _config(tmp_path)
    got: list[IP] = []
    barrier = threading.Barrier(50)

    def one(i: int) -> None:
        store = ipam.Store(tmp_path, "pods")
        barrier.wait()
        got.extend(a.ip for a in ipam.allocate(store, config, ipam.Owner(f"t{i}", "eth0")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 50 and len(set(got)) == 50


def test_free_count_and_writable(tmp_path: Path) -> None:
    config = _config(tmp_path, "198.18.7.0/29", reserved=["198.18.7.6"])
    store = ipam.Store(tmp_path, "pods")
    assert ipam.free_count(store, config) == [4]
    ipam.allocate(store, config, ipam.Owner("a", "eth0"))
    assert ipam.free_count(store, config) == [3]
    ipam.ensure_writable(store)
