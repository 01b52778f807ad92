"""The fake runtime's contract: `tests/cricontract.py` run unchanged on the testbed's containerd and on `cri.fake`
gives the same transcript, GetContainerEvents shapes, log files and exec sessions (ids, times and addresses normalised
away)."""

from __future__ import annotations

from pathlib import Path

from cri.client import CRIClient
from cri.fake import FakeCRI, StreamingServer
from cri.v1 import api_pb2
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from tests.cricontract import run_events_scenario, run_exec_scenario, run_log_scenario, run_scenario


async def test_fake_runtime_transcript_matches_containerd(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    image = configs.busybox_image(settings)
    missing = f"{settings.registry}/absent:1"
    real = await run_scenario(
        cri_client.runtime, cri_client.image, image, str(tmp_path / "real"), missing_image=missing
    )
    fake_cri = FakeCRI("contract")
    fake = await run_scenario(fake_cri.runtime, fake_cri.image, image, str(tmp_path / "fake"), missing_image=missing)
    assert len(real) > 30
    for got, want in zip(fake, real, strict=True):
        assert got == want, f"fake: {got}\ncontainerd: {want}"


async def test_fake_runtime_events_match_containerd(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> None:
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    real = await run_events_scenario(cri_client.runtime, image, str(tmp_path / "real"))
    fake_cri = FakeCRI("contract")
    await fake_cri.image.pull_image(api_pb2.ImageSpec(image=image))
    fake = await run_events_scenario(fake_cri.runtime, image, str(tmp_path / "fake"))
    assert real, "containerd sent no event"
    assert fake == real


async def test_fake_runtime_log_files_match_containerd(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    """The same containers (echo, `sh -c "echo ..."`, `echo -n`, a bare echo, a silent one, one never started) leave
    the same log files on both runtimes: the same records, the same modes and directories, the same answer from the
    agent's log reader; none before StartContainer, and the file kept by RemoveContainer."""
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    real = await run_log_scenario(cri_client.runtime, image, str(tmp_path / "real"))
    fake_cri = FakeCRI("contract")
    await fake_cri.image.pull_image(api_pb2.ImageSpec(image=image))
    fake = await run_log_scenario(fake_cri.runtime, image, str(tmp_path / "fake"))
    assert real[1][:4] == ("exited", "echo", 0, "Completed"), real
    for got, want in zip(fake, real, strict=True):
        assert got == want, f"fake: {got}\ncontainerd: {want}"


async def test_fake_runtime_exec_matches_containerd(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> None:
    """CRI Exec and the SPDY/3.1 session at its URL, spoken to as client-go does, give the same on both: the output
    (a tty's `\\r\\n` too), the error stream's Status (v4) or message (v2, v3), the protocol chosen, the 403 of none
    in common, a URL used twice, and Exec's refusals. containerd's framing and header compression are Go's
    spdystream, so this also holds `cri.fake.spdy` to the real wire."""
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    real = await run_exec_scenario(cri_client.runtime, image, str(tmp_path / "real"))
    server = StreamingServer()
    await server.start()
    try:
        fake_cri = FakeCRI("contract", streaming=server)
        await fake_cri.image.pull_image(api_pb2.ImageSpec(image=image))
        fake = await run_exec_scenario(fake_cri.runtime, image, str(tmp_path / "fake"))
    finally:
        await server.close()
    assert real[0][:5] == ("exec", "echo", 101, "v4.channel.k8s.io", b"hello exec\n"), real
    for got, want in zip(fake, real, strict=True):
        assert got == want, f"fake: {got}\ncontainerd: {want}"
