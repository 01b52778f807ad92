"""Malformed network configurations, each with its code and a message that names the field."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from cni.config import parse_netconf
from cni.errors import CNIError, Code
from cni.spec import Command


def conf(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "pods",
        "type": "nodeagent-bridge",
        "bridge": "nabr0",
        "ipam": {"type": "nodeagent-ipam", "ranges": [[{"subnet": "198.18.7.0/24"}]]},
    }
    doc.update(over)
    return doc


def ipam(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "nodeagent-ipam", "ranges": [[{"subnet": "198.18.7.0/24"}]]}
    doc.update(over)
    return {"ipam": doc}


def rng(**fields: Any) -> dict[str, Any]:
    return ipam(ranges=[[{"subnet": "198.18.7.0/24", **fields}]])


CASES: list[tuple[str, bytes, Code, str]] = [
    ("not json", b"{nope", Code.DECODE_FAILURE, "not JSON"),
    ("not an object", b"[1]", Code.DECODE_FAILURE, "must be a JSON object"),
    ("no cniVersion", json.dumps({k: v for k, v in conf().items() if k != "cniVersion"}).encode(),
     Code.INVALID_CONFIG, "cniVersion is required"),
    ("old cniVersion", json.dumps(conf(cniVersion="0.4.0")).encode(), Code.INCOMPATIBLE_VERSION,
     "cniVersion 0.4.0 is not supported"),
    ("bad name", json.dumps(conf(name="-x")).encode(), Code.INVALID_CONFIG, "name '-x' is invalid"),
    ("other plugin", json.dumps(conf(type="bridge")).encode(), Code.INVALID_CONFIG, "type 'bridge'"),
    ("long bridge", json.dumps(conf(bridge="b" * 16)).encode(), Code.INVALID_CONFIG, "bridge 'bbbbbbbbbbbbbbbb'"),
    ("mtu text", json.dumps(conf(mtu="1500")).encode(), Code.INVALID_CONFIG, "mtu '1500'"),
    ("mtu small", json.dumps(conf(mtu=10)).encode(), Code.INVALID_CONFIG, "mtu 10"),
    ("hairpin text", json.dumps(conf(hairpinMode="yes")).encode(), Code.INVALID_CONFIG, "hairpinMode must be"),
    ("ipMasq", json.dumps(conf(ipMasq=True)).encode(), Code.UNSUPPORTED_FIELD, "ipMasq=true"),
    ("vlan", json.dumps(conf(vlan=5)).encode(), Code.UNSUPPORTED_FIELD, "vlan=5"),
    ("no ipam", json.dumps({k: v for k, v in conf().items() if k != "ipam"}).encode(),
     Code.INVALID_CONFIG, "ipam is required"),
    ("host-local", json.dumps(conf(**ipam(type="host-local"))).encode(), Code.UNSUPPORTED_FIELD,
     "ipam.type=host-local"),
    ("no ranges", json.dumps(conf(ipam={"type": "nodeagent-ipam"})).encode(), Code.INVALID_CONFIG,
     "ipam.ranges is required"),
    ("empty set", json.dumps(conf(**ipam(ranges=[[]]))).encode(), Code.INVALID_CONFIG, "ipam.ranges[0] must be"),
    ("bad subnet", json.dumps(conf(**ipam(ranges=[[{"subnet": "198.18.7.0/33"}]]))).encode(),
     Code.INVALID_CONFIG, "ipam.ranges[0][0].subnet"),
    ("ipv6", json.dumps(conf(**ipam(ranges=[[{"subnet": "fd00::/64"}]]))).encode(), Code.UNSUPPORTED_FIELD,
     "is IPv6"),
    ("tiny subnet", json.dumps(conf(**ipam(ranges=[[{"subnet": "198.18.7.0/31"}]]))).encode(),
     Code.INVALID_CONFIG, "too small"),
    ("gateway outside", json.dumps(conf(**rng(gateway="198.18.8.1"))).encode(), Code.INVALID_CONFIG,
     "gateway 198.18.8.1 is not a host address of 198.18.7.0/24"),
    ("broadcast end", json.dumps(conf(**rng(rangeEnd="198.18.7.255"))).encode(), Code.INVALID_CONFIG,
     "rangeEnd 198.18.7.255"),
    ("start after end", json.dumps(conf(**rng(rangeStart="198.18.7.100", rangeEnd="198.18.7.50"))).encode(),
     Code.INVALID_CONFIG, "is after rangeEnd"),
    ("overlapping sets", json.dumps(conf(**ipam(ranges=[[{"subnet": "198.18.7.0/24"}],
                                                        [{"subnet": "198.18.7.128/25"}]]))).encode(),
     Code.INVALID_CONFIG, "overlap"),
    ("bad route", json.dumps(conf(**ipam(routes=[{"dst": "nowhere"}]))).encode(), Code.INVALID_CONFIG,
     "ipam.routes[0].dst"),
    ("bad reserved", json.dumps(conf(**ipam(reserved=["x"]))).encode(), Code.INVALID_CONFIG,
     "ipam.reserved[0]"),
    ("relative dataDir", json.dumps(conf(**ipam(dataDir="var/lib"))).encode(), Code.INVALID_CONFIG,
     "must be an absolute path"),
    ("bad prevResult", json.dumps(conf(prevResult={"ips": [{"address": 5}]})).encode(), Code.DECODE_FAILURE,
     "prevResult"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "code", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_config_gets_its_code(raw: bytes, code: Code, fragment: str) -> None:
    with pytest.raises(CNIError) as info:
        parse_netconf(raw, Command.ADD)
    assert info.value.code is code
    assert fragment in info.value.msg


def test_defaults_follow_the_reference_plugins() -> None:
    doc = {"cniVersion": "1.1.0", "name": "n", "type": "nodeagent-bridge", "ipam": {"subnet": "198.18.7.0/24"}}
    parsed = parse_netconf(json.dumps(doc).encode(), Command.ADD)
    assert (parsed.bridge, parsed.mtu, parsed.is_gateway, parsed.hairpin) == ("cni0", 1500, False, False)
    assert parsed.ipam.data_dir == Path("/var/lib/cni/networks")
    (only,) = parsed.ipam.ranges[0]
    assert (str(only.start), str(only.end), str(only.gateway)) == ("198.18.7.1", "198.18.7.254", "198.18.7.1")


def test_is_default_gateway_implies_gateway() -> None:
    parsed = parse_netconf(json.dumps(conf(isDefaultGateway=True)).encode(), Command.ADD)
    assert parsed.is_gateway and parsed.is_default_gateway


def test_ranges_reserved_and_gc_attachments() -> None:
    doc = conf(
        cniVersion="1.1.0",
        **ipam(reserved=["198.18.7.10", "198.18.7.240/28"]),
        **{"cni.dev/valid-attachments": [{"containerID": "abc", "ifname": "eth0"}]},
    )
    parsed = parse_netconf(json.dumps(doc).encode(), Command.GC)
    assert parsed.ipam.is_reserved(ipaddress.IPv4Address("198.18.7.10"))
    assert parsed.ipam.is_reserved(ipaddress.IPv4Address("198.18.7.250"))
    assert not parsed.ipam.is_reserved(ipaddress.IPv4Address("198.18.7.11"))
    assert parsed.valid_attachments is not None
    assert [(a.container_id, a.ifname) for a in parsed.valid_attachments] == [("abc", "eth0")]


def test_unknown_fields_are_ignored() -> None:
    parsed = parse_netconf(json.dumps(conf(runtimeConfig={"portMappings": []}, whatever=1)).encode(), Command.ADD)
    assert parsed.name == "pods"
