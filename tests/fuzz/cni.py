"""The CNI plugin's inputs: the CNI_* environment (CNI_ARGS included) and the configuration on stdin, through
`cni.plugin.execute`, which documents that it never raises. The network factory stops the call before anything
would touch the kernel or the IPAM directory: everything up to that point (environment, version, configuration,
IPAM ranges, prevResult, GC attachments) is what runs. A crash is an exception out of `execute`, a reply that is not
CNI JSON, a success where none is possible, or an error with code 999 (the plugin's "internal error": a bug)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import strategies as st

from cni.config import parse_netconf
from cni.errors import CNIError, Code
from cni.network import Network
from cni.plugin import execute
from cni.spec import Command, parse_cni_args, parse_environment
from tests.fuzz.engine import Target
from tests.fuzz.strategies import encoded, hostile_documents, json_values, mutated, odd_strings, strings


class ReachedNetwork(BaseException):
    """The call got past every check and asked for the network (a BaseException: `execute` catches Exception)."""


def _no_network() -> Network:
    raise ReachedNetwork


_CONF: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "fuzznet",
    "type": "nodeagent-bridge",
    "bridge": "fz0",
    "isGateway": True,
    "isDefaultGateway": False,
    "hairpinMode": True,
    "mtu": 1500,
    "ipam": {
        "type": "nodeagent-ipam",
        "dataDir": "/nonexistent/fuzz-ipam",
        "ranges": [[{"subnet": "198.18.7.0/24", "rangeStart": "198.18.7.10", "rangeEnd": "198.18.7.200",
                     "gateway": "198.18.7.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "198.19.0.0/16", "gw": "198.18.7.1"}],
        "reserved": ["198.18.7.5", "198.18.7.64/28"],
    },
    "dns": {"nameservers": ["198.19.0.10"], "domain": "cluster.local", "search": ["a"], "options": ["ndots:5"]},
    "prevResult": {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:58:c6:12:07:0a", "sandbox": "/var/run/netns/x"}],
        "ips": [{"address": "198.18.7.10/24", "gateway": "198.18.7.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "198.18.7.1"}],
        "dns": {},
    },
    "cni.dev/valid-attachments": [{"containerID": "abc", "ifname": "eth0"}],
    "runtimeConfig": {"portMappings": []},
}  # fmt: skip
_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "eth0",
    "CNI_ARGS": "K8S_POD_NAME=web;K8S_POD_NAMESPACE=default;IgnoreUnknown=1",
    "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
}

_commands = st.one_of(st.sampled_from([c.value for c in Command]), odd_strings)
_env_values = st.one_of(strings, st.text(alphabet="=;:/,abcK8S_", max_size=30))
environments = st.builds(
    lambda base, command, edits, drop: {
        **{k: v for k, v in base.items() if k not in drop},
        "CNI_COMMAND": command,
        **edits,
    },
    st.just(_ENV),
    _commands,
    st.dictionaries(st.sampled_from(list(_ENV)), _env_values, max_size=3),
    st.sets(st.sampled_from(list(_ENV)), max_size=2),
)
stdins = st.one_of(
    encoded(mutated(_CONF)).filter(lambda b: True),
    st.builds(lambda doc: json.dumps(doc).encode(), mutated(_CONF, max_mutations=6)),
    st.builds(lambda doc: json.dumps(doc).encode(), json_values(10)),
    hostile_documents.map(str.encode),
    st.binary(max_size=100),
)


def run(case: tuple[dict[str, str], bytes]) -> None:
    env, stdin = case
    try:
        reply = execute(env, stdin, _no_network)
    except ReachedNetwork:
        return
    doc = json.loads(reply.stdout)
    if reply.status == 0:
        if env.get("CNI_COMMAND") != "VERSION":
            raise AssertionError(f"status 0 without reaching the network: {doc}")
        return
    if doc.get("code") == Code.INTERNAL:
        raise AssertionError(f"internal error reply: {doc.get('msg')}")
    # The pieces on their own, as the shim and the helper also call them.
    for command in Command:
        with contextlib.suppress(CNIError):
            parse_netconf(stdin, command)
    try:
        parse_environment(env)
        parse_cni_args(env.get("CNI_ARGS", ""))
    except CNIError:
        pass


TARGET = Target("cni", st.tuples(environments, stdins), run, (), __doc__ or "")
