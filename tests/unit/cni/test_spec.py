"""The CNI_* environment, VERSION and the Result JSON, per spec 1.0.0 / 1.1.0."""

from __future__ import annotations

import ipaddress

import pytest

from cni.errors import CNIError, Code
from cni.spec import (
    DNS,
    Command,
    Interface,
    IPConfig,
    Result,
    Route,
    merge_into_previous,
    parse_environment,
    parse_result,
    sandbox_ips,
    version_reply,
)

FULL = {"CNI_CONTAINERID": "abc", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0"}


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "CNI_COMMAND is missing"),
        ({"CNI_COMMAND": "add"}, "CNI_COMMAND is 'add'"),
        ({"CNI_COMMAND": "ADD"}, "CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME are required for ADD"),
        ({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_IFNAME": "eth0"}, "CNI_NETNS is required for ADD"),
        ({"CNI_COMMAND": "CHECK", "CNI_NETNS": "/n"}, "CNI_CONTAINERID, CNI_IFNAME are required for CHECK"),
        ({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "abc"}, "CNI_IFNAME is required for DEL"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_CONTAINERID": "-abc"}, "CNI_CONTAINERID '-abc' is invalid"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_CONTAINERID": "a/b"}, "CNI_CONTAINERID 'a/b' is invalid"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_IFNAME": "a" * 16}, "is 16 characters long"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_IFNAME": "eth:0"}, "contains '/', ':' or whitespace"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_IFNAME": ".."}, "is '..'"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_NETNS": "run/netns/x"}, "not an absolute path"),
        ({"CNI_COMMAND": "ADD", **FULL, "CNI_ARGS": "K8S_POD_NAME"}, "CNI_ARGS is malformed"),
    ],
)
def test_invalid_environment_is_code_4_naming_the_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(CNIError) as info:
        parse_environment(env)
    assert info.value.code is Code.INVALID_ENVIRONMENT
    assert fragment in info.value.msg


@pytest.mark.parametrize(
    ("env", "command"),
    [
        ({"CNI_COMMAND": "VERSION"}, Command.VERSION),
        ({"CNI_COMMAND": "STATUS"}, Command.STATUS),
        ({"CNI_COMMAND": "GC", "CNI_PATH": "/opt/cni/bin"}, Command.GC),
        ({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "abc", "CNI_IFNAME": "eth0"}, Command.DEL),  # no netns: fine
        ({"CNI_COMMAND": "ADD", **FULL}, Command.ADD),
    ],
)
def test_valid_environment(env: dict[str, str], command: Command) -> None:
    assert parse_environment(env).command is command


def test_cni_args_are_parsed_and_kept() -> None:
    inv = parse_environment({"CNI_COMMAND": "ADD", **FULL, "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web;"})
    assert inv.args == {"IgnoreUnknown": "1", "K8S_POD_NAME": "web"}


@pytest.mark.parametrize(
    ("requested", "echoed"),
    [("1.0.0", "1.0.0"), ("1.1.0", "1.1.0"), ("0.3.1", "1.1.0"), (None, "1.1.0")],
)
def test_version_reply(requested: str | None, echoed: str) -> None:
    assert version_reply(requested) == {"cniVersion": echoed, "supportedVersions": ["1.0.0", "1.1.0"]}


def _result(version: str) -> Result:
    return Result(
        cni_version=version,
        interfaces=(
            Interface("cni0", "0a:58:c6:12:07:01", mtu=1500),
            Interface("veth0123456789a", "aa:bb:cc:dd:ee:ff", mtu=1500),
            Interface("eth0", "0a:58:c6:12:07:05", sandbox="/run/netns/x", mtu=1500),
        ),
        ips=(IPConfig(ipaddress.ip_interface("198.18.7.5/24"), ipaddress.ip_address("198.18.7.1"), 2),),
        routes=(Route(ipaddress.ip_network("0.0.0.0/0")),),
    )


def test_result_json_1_0_0_is_exactly_the_spec_shape() -> None:
    assert _result("1.0.0").to_json() == {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "cni0", "mac": "0a:58:c6:12:07:01"},
            {"name": "veth0123456789a", "mac": "aa:bb:cc:dd:ee:ff"},
            {"name": "eth0", "mac": "0a:58:c6:12:07:05", "sandbox": "/run/netns/x"},
        ],
        "ips": [{"address": "198.18.7.5/24", "gateway": "198.18.7.1", "interface": 2}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {},
    }


def test_result_json_1_1_0_carries_mtu() -> None:
    doc = _result("1.1.0").to_json()
    assert [i["mtu"] for i in doc["interfaces"]] == [1500, 1500, 1500]


def test_result_round_trips_as_prev_result() -> None:
    result = _result("1.0.0")
    assert parse_result(result.to_json(), "1.0.0") == Result(
        cni_version="1.0.0",
        interfaces=tuple(Interface(i.name, i.mac, i.sandbox) for i in result.interfaces),  # 1.0.0 drops mtu
        ips=result.ips,
        routes=result.routes,
    )


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"ips": [{"address": "nope"}]},
        {"interfaces": [{"mac": "x"}]},
        {"ips": [{"address": "198.18.7.5/24", "interface": 3}]},
        {"dns": "198.18.0.10"},  # an address where an object must be
    ],
)
def test_a_bad_prev_result_is_a_decode_failure(bad: object) -> None:
    with pytest.raises(CNIError) as info:
        parse_result(bad, "1.0.0")
    assert info.value.code in (Code.DECODE_FAILURE,)


def test_chained_add_appends_and_shifts_interface_indexes() -> None:
    previous = Result(
        cni_version="1.0.0",
        interfaces=(Interface("dummy0", "02:00:00:00:00:01"),),
        ips=(IPConfig(ipaddress.ip_interface("198.19.0.2/24"), None, 0),),
        dns=DNS(nameservers=("198.19.0.10",)),
    )
    merged = merge_into_previous(previous, _result("1.0.0"))
    assert [i.name for i in merged.interfaces] == ["dummy0", "cni0", "veth0123456789a", "eth0"]
    assert [ip.interface for ip in merged.ips] == [0, 3]
    assert merged.dns.nameservers == ("198.19.0.10",)
    assert [str(ip.address) for ip in sandbox_ips(merged, "eth0")] == ["198.18.7.5/24"]
