"""The claim cache's checkpoint: round trip, refusal of a damaged file, and which CDI devices a request gets."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.dra.claiminfo import (
    CHECKPOINT_NAME,
    CheckpointError,
    ClaimInfo,
    ClaimInfoCache,
    Device,
    read_checkpoint,
    write_checkpoint,
)


def info() -> ClaimInfo:
    return ClaimInfo(
        claim_uid="u1",
        claim_name="c1",
        namespace="ns",
        pod_uids={"p2", "p1"},
        drivers={
            "d.example": [
                Device("pool", "dev-0", ("gpu",), ("d.example/device=a",)),
                Device("pool", "dev-1", ("nic",), ("d.example/device=b", "d.example/device=c")),
                Device("pool", "dev-2", (), ("d.example/device=d",)),
            ]
        },
    )


def test_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / CHECKPOINT_NAME)
    write_checkpoint(path, [info()])
    [back] = read_checkpoint(path)
    assert back == info()
    assert back.prepared is False  # as upstream: prepared again after a restart
    body = json.loads(Path(path).read_text())["Data"]
    assert (body["kind"], body["apiVersion"]) == ("DRACheckpoint", "checkpoint.dra.kubelet.k8s.io/v1")


def test_no_file_is_an_empty_cache(tmp_path: Path) -> None:
    assert read_checkpoint(str(tmp_path / "absent")) == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text.replace('"c1"', '"c2"'), id="checksum"),
        pytest.param(lambda text: text[:-5], id="truncated"),
        pytest.param(lambda text: text.replace("DRACheckpoint", "Other"), id="kind"),
    ],
)
def test_a_damaged_checkpoint_is_refused(tmp_path: Path, damage: Callable[[str], str]) -> None:
    path = tmp_path / CHECKPOINT_NAME
    write_checkpoint(str(path), [info()])
    path.write_text(damage(path.read_text()))
    with pytest.raises(CheckpointError):
        ClaimInfoCache(str(tmp_path))


@pytest.mark.parametrize(
    ("request_name", "expected"),
    [
        ("", ["d.example/device=a", "d.example/device=b", "d.example/device=c", "d.example/device=d"]),
        ("gpu", ["d.example/device=a", "d.example/device=d"]),
        ("nic", ["d.example/device=b", "d.example/device=c", "d.example/device=d"]),
    ],
)
def test_cdi_devices_of_a_request(request_name: str, expected: list[str]) -> None:
    # A device names the requests it serves; one that names none serves them all (upstream cdiDevicesAsList).
    assert info().cdi_devices(request_name) == expected


def test_cache_keeps_claims_by_namespace_and_name(tmp_path: Path) -> None:
    cache = ClaimInfoCache(str(tmp_path))
    cache.add(info())
    cache.sync()
    again = ClaimInfoCache(str(tmp_path))
    assert again.get("c1", "ns") == info()
    assert again.get("c1", "other") is None
    assert again.has_pod_reference("p1") and not again.has_pod_reference("p3")
    again.delete("c1", "ns")
    again.sync()
    assert ClaimInfoCache(str(tmp_path)).get("c1", "ns") is None
