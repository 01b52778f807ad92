"""Every input that ever crashed a fuzz target, exactly as found (or cut down by hand to what still crashed), with
the fix. `tests/fuzz/test_fuzz.py` runs each through its target on every pytest run: none may crash again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csi.v1 import csi_pb2


@dataclass(frozen=True)
class Regression:
    target: str
    input: Any
    found: str  # what it did, and the fix


_CNI_ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0"}
_API_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {"cpu": "1e999999", "memory": "1e999999"}, "requests": {"memory": "9Ei"}},
                "env": [{"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}],
            }
        ],
        "overhead": {"cpu": "1e309", "memory": "1e309"},
    },
}

REGRESSIONS = [
    Regression(
        "cni",
        (_CNI_ENV, b'{"a":' * 5000 + b"1" + b"}" * 5000),
        "RecursionError out of execute() (documented never to raise): requested_version's json.loads recursed per "
        "level; decode() let it become code 999. Fixed in cni/config.py: decode failure (code 6), version unknown.",
    ),
    Regression(
        "cni",
        ({**_CNI_ENV, "CNI_COMMAND": "VERSION"}, b"[" * 100_000 + b"]" * 100_000),
        "The same through VERSION, whose reply is built before the configuration is read.",
    ),
    Regression(
        "kubeletconfig",
        "\x80",
        "yaml.ReaderError (not ConfigError) for a control character: the reader checks them as the loader is made, "
        "which was outside the try. Fixed in nodeagent/config/loading.py.",
    ),
    Regression(
        "kubeletconfig",
        "".join(" " * i + "a:\n" for i in range(1200)) + " " * 1200 + "b: 1\n",
        "RecursionError from PyYAML's composer on 1200 nested maps. Fixed in nodeagent/config/loading.py: "
        "ConfigError 'nests too deeply'.",
    ),
    Regression(
        "quantities",
        ("7" * 4312 + "s", 0),
        "ValueError (int's 4300-digit limit) from go_duration_nanoseconds. Fixed in nodeagent/config/durations.py: "
        "DurationError 'out of range' past 40 significant digits; fraction digits past 40 are ignored.",
    ),
    Regression(
        "quantities",
        ("0." + "5" * 5000 + "s", 0),
        "The same in the fraction.",
    ),
    Regression(
        "eviction",
        ("text", "a: " + "[" * 1200 + "]" * 1200 + "\n", {}, {}, {}, {}),
        "RecursionError out of load_scenario. Fixed in nodeagent/experiment/scenario.py: ScenarioError.",
    ),
    Regression(
        "eviction",
        (
            "doc",
            {},
            {"memory.available": "1e999999", "nodefs.available": "999e999999"},
            {},
            {},
            {"memory.available": "1e999999"},
        ),
        "A hang (the run's hard watchdog, seed 35): printing the threshold 1e999999 made an int of a million digits "
        "and divided it by 1000 until done; an evictionHard like it hung the agent's start-up. Fixed in "
        "eviction/thresholds.py: past int64, the exponent form straight from the Decimal.",
    ),
    Regression(
        "eviction",
        ("doc", {"inject": {"memory.available": [[1, "1e999999"], [2, "observed-1e999999"]]}}, {}, {}, {}, {}),
        "A hang (the run's hard watchdog, seed 35, pass 3): an injected value of 1e999999 became an int of a "
        "million digits. Fixed in eviction/injection.py: amounts saturate at int64.",
    ),
    Regression(
        "eviction",
        ("doc", {"pods": [{"name": "hog", "workload": {"type": "memory-hog", "rate": "1e999999"}}]}, {}, {}, {}, {}),
        "The same hang in the scenario's own quantities (a workload's rate). Fixed in "
        "nodeagent/experiment/scenario.py: _whole saturates at int64.",
    ),
    Regression(
        "csi",
        csi_pb2.NodeGetVolumeStatsResponse(
            usage=[csi_pb2.VolumeUsage(available=1, total=2, used=1, unit=-379)],  # type: ignore[arg-type]
            volume_condition=csi_pb2.VolumeCondition(),
        ),
        "ValueError from VolumeUsage.Unit.Name() on a unit the proto does not name (an open enum), in the warning "
        "about it. Fixed in nodeagent/volume/csiutil.py: the number is logged.",
    ),
    Regression(
        "apipods",
        _API_POD,
        "A valid but huge quantity: decimal.Overflow in admission (scaled), ValueError 'Value out of range' from "
        "the CRI int64 fields (memory limit, overhead), and a hang turning 1e999999 into an int. Fixed with "
        "nodeagent.config.quantity.ceil_int64 (saturated at int64, as upstream's int64 fields hold it) in "
        "admission/resources.py, kuberuntime/container_config.py and kuberuntime/sandbox_config.py.",
    ),
    Regression(
        "apipods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "m0", "namespace": "default", "uid": "u1"},
            # The target hands each container's name to make_container_config as the image's user.
            "spec": {"containers": [{"name": "9" * 400, "image": "busybox"}]},
        },
        "ValueError 'Value out of range' from run_as_user: an image user of digits past int64 (containerd keeps it as "
        "a user name) was taken for a uid (found by the documented run, seed 34). Fixed in "
        "kuberuntime/container_config.py parse_image_user: a uid only within int64, else the user name.",
    ),
    Regression(
        "kubeletapi",
        ("X", "//[]/<script>", "/.:@", [("cmd", "A")], [], None, True),
        "ValueError \"'' does not appear to be an IPv4 or IPv6 address\" out of parse_target (the connection loop, "
        "outside any handler): urlsplit read '//[]' as an authority (found by the documented run, seed 35). Fixed "
        "in nodeagent/server/http.py: an origin-form target is a path, as Go's ParseRequestURI reads it.",
    ),
    Regression(
        "kubeletapi",
        ("GET", "/logs/..%00/etc/shadow", "/%", [], [], None, False),
        "ValueError 'embedded null byte' out of the /logs path resolution (issue 34's 500). Reported to H1, whose "
        "fix (nodeagent/server/logs.py node_log_target) answers 404 as upstream.",
    ),
    Regression(
        "kubeletapi",
        ("GET", "/logs/" + "A" * 300, "/", [], [], None, False),
        "OSError ENAMETOOLONG out of Path.is_dir() in the /logs path resolution. Reported to H1, whose fix answers "
        "500 as Go's file server does for an error that is neither 'not exist' nor 'permission'.",
    ),
]
