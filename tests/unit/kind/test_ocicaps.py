"""The runtime in front of runc: capabilities outside the host's bounding set are dropped, nothing else changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.kind import ocicaps

# This host's CapBnd: every capability up to CAP_CHECKPOINT_RESTORE (40) except CAP_SYS_RESOURCE (24).
HOST_MASK = 0x000001FFFEFFFFFF


def test_bounding_set_of_a_status_text() -> None:
    assert ocicaps.bounding_set("Name:\tx\nCapBnd:\t000001fffeffffff\nCapAmb:\t0\n") == HOST_MASK
    assert ocicaps.CAP_NUMBERS["CAP_SYS_RESOURCE"] == 24
    assert ocicaps.CAP_NUMBERS["CAP_CHECKPOINT_RESTORE"] == 40


def test_restrict_drops_only_what_the_host_lacks() -> None:
    process: dict[str, object] = {
        "capabilities": {
            "bounding": ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_FUTURE_THING"],
            "effective": ["CAP_SYS_RESOURCE"],
            "permitted": ["CAP_NET_ADMIN"],
        }
    }
    assert ocicaps.restrict({"process": process}, HOST_MASK) == ["CAP_SYS_RESOURCE"]
    assert process["capabilities"] == {
        "bounding": ["CAP_SYS_ADMIN", "CAP_FUTURE_THING"],
        "effective": [],
        "permitted": ["CAP_NET_ADMIN"],
    }
    assert ocicaps.restrict({"process": process}, HOST_MASK) == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [
                "--root",
                "/r",
                "--log",
                "/l",
                "--log-format",
                "json",
                "create",
                "--bundle",
                "/b",
                "--pid-file",
                "p",
                "id",
            ],
            (Path("/b/config.json"), True),
        ),
        (["run", "--bundle=/b2", "id"], (Path("/b2/config.json"), True)),
        (["--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"], (Path("/tmp/p.json"), False)),
        (["--root", "/r", "start", "id"], None),
        (["--root", "create", "state", "id"], None),  # `create` here is --root's value
    ],
)
def test_which_file_is_restricted(argv: list[str], expected: tuple[Path, bool] | None) -> None:
    assert ocicaps.spec_to_restrict(argv) == expected


def test_main_rewrites_the_bundle_then_execs_runc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = {"ociVersion": "1.0.2", "process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE"]}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    execs: list[tuple[str, list[str]]] = []
    monkeypatch.setattr("os.execv", lambda path, args: execs.append((path, list(args))))
    monkeypatch.setattr(ocicaps, "bounding_set", lambda _status: HOST_MASK)
    argv = ["create", "--bundle", str(tmp_path), "c1"]
    ocicaps.main(argv)
    assert json.loads((tmp_path / "config.json").read_text())["process"]["capabilities"] == {"bounding": ["CAP_CHOWN"]}
    assert execs == [("/usr/sbin/runc", ["/usr/sbin/runc", *argv])]
