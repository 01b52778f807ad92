"""The static pod directory source: what a read of the path yields, and how the source follows the path over time.

`list_manifests` runs on real temporary directories. `FileSource` runs with a fake clock and a scripted watcher (the
seam where watchfiles sits); one test runs the real watcher (inotify) on a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.podconfig import Operation, SourceUpdate
from nodeagent.sources.file import FileSource, list_manifests, watch_path
from nodeagent.sources.manifest import MAX_MANIFEST_BYTES
from nodeagent.sources.problems import ManifestProblem
from tests.unit.fakeclock import FakeClock

NODE = "node-1"


def manifest(name: str, image: str = "busybox:1.35") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }
    )


def names(pods: Any) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_a_directory_yields_its_valid_manifests_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(manifest("b"))
    (tmp_path / "a.json").write_text('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},'
                                     ' "spec": {"containers": [{"name": "c", "image": "i:1"}]}}')  # fmt: skip
    (tmp_path / ".hidden.yaml").write_text(manifest("hidden"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text(manifest("c"))
    (tmp_path / "link.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "bad.yaml").write_text("kind: [")
    (tmp_path / "big.yaml").write_bytes(b"#" * (MAX_MANIFEST_BYTES + 1))
    (tmp_path / "binary").write_bytes(b"\x00\xff\xfe")
    os.mkfifo(tmp_path / "fifo")

    listing = list_manifests(str(tmp_path), node_name=NODE)
    # link.yaml names the same pod as b.yaml from another file: another UID (the source is part of it), same name;
    # PodConfig keeps the first and reports the other.
    assert names(listing.pods) == ["a-node-1", "b-node-1", "b-node-1"]
    assert sorted(listing.origins.values()) == [str(tmp_path / n) for n in ("a.json", "b.yaml", "link.yaml")]
    problems = {Path(p.origin).name: p.message for p in listing.problems}
    assert set(problems) == {"bad.yaml", "big.yaml", "binary", "fifo"}
    assert problems["bad.yaml"].startswith("couldn't parse as pod(not valid YAML or JSON")
    assert problems["bad.yaml"].endswith("), please check config file")  # upstream file.go's words
    assert "size limit" in problems["big.yaml"]
    assert "not UTF-8" in problems["binary"]
    assert problems["fifo"] == "not a regular file"
    assert not listing.missing and listing.identity is not None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # Not a pod at all: upstream file.go's "couldn't parse as pod(...), please check config file".
        (b"kind: [", "couldn't parse as pod(not valid YAML or JSON: "),
        (b'{"kind": ', "couldn't parse as pod(not valid JSON: "),
        (b"\xff", "couldn't parse as pod(the manifest is not UTF-8: "),
        (b"apiVersion: v1\nkind: Service\n", "couldn't parse as pod(kind 'Service' of apiVersion 'v1' is not a v1 Pod"),
        (b"kind: Pod\n", "couldn't parse as pod(Object 'apiVersion' is missing"),
        (b"- a\n", "couldn't parse as pod(a list, not an object"),
        (b"just words\n", "couldn't parse as pod(a str, not an object"),
    ],
)
def test_a_file_that_is_no_pod_says_please_check_config_file(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "m.yaml").write_bytes(content)
    [problem] = list_manifests(str(tmp_path), node_name=NODE).problems
    assert problem.origin == str(tmp_path / "m.yaml")
    assert problem.message.startswith(message)
    assert problem.message.endswith("), please check config file")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (manifest("x", image=""), "invalid pod: [spec.containers[0].image: Required value]"),
        (b"apiVersion: v1\nkind: Pod\nmetadata: {name: 7}\nspec: {}\n", "invalid pod: [metadata.name: Invalid"),
    ],
)
def test_a_pod_that_is_invalid_keeps_upstreams_words_without_the_suffix(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    [problem] = list_manifests(str(tmp_path), node_name=NODE).problems
    assert problem.message.startswith(message)
    assert "please check config file" not in problem.message


def test_a_single_file_path_and_a_missing_path(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(manifest("one"))
    assert names(list_manifests(str(path), node_name=NODE).pods) == ["one-node-1"]
    missing = list_manifests(str(tmp_path / "nope"), node_name=NODE)
    assert missing.missing and missing.pods == ()


def test_a_path_that_is_neither_file_nor_directory_is_unreadable(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a directory or a regular file"):
        list_manifests(str(tmp_path / "fifo"), node_name=NODE)


class ScriptedWatcher:
    """Stands in for watchfiles: each `fire()` is one batch of changes; `fail` makes the next watch raise."""

    def __init__(self) -> None:
        self.batches: asyncio.Queue[set[Any] | None] = asyncio.Queue()
        self.watches = 0
        self.fail: Exception | None = None
        self.closed = 0

    async def __call__(self, path: str, period_ms: int) -> AsyncGenerator[set[Any], None]:
        del path, period_ms
        self.watches += 1
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        try:
            while True:
                batch = await self.batches.get()
                if batch is None:
                    return
                yield batch
        finally:
            self.closed += 1

    def fire(self) -> None:
        self.batches.put_nowait({("modified", "x")})


class Harness:
    def __init__(self, path: Path) -> None:
        self.updates: list[SourceUpdate] = []
        self.problems: list[ManifestProblem] = []
        self.clock = FakeClock()
        self.watcher = ScriptedWatcher()
        self.source = FileSource(
            str(path) + "/",
            node_name=NODE,
            push=self.updates.append,
            check_frequency=20,
            on_problem=self.problems.append,
            clock=self.clock,
            watcher=self.watcher,
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.source.run())
        await self.settle(reads=1)

    async def settle(self, reads: int | None = None) -> None:
        """Let the source work until it has completed `reads` reads (they run in a thread) and waits again."""
        deadline = asyncio.get_running_loop().time() + 30
        while reads is not None and self.source.reads < reads:
            assert asyncio.get_running_loop().time() < deadline, f"{self.source.reads} reads, not {reads}"
            await asyncio.sleep(0.005)
        for _ in range(20):  # the source goes on to its next wait (the clock or the watcher)
            await asyncio.sleep(0)

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def last(self) -> list[str]:
        assert self.updates[-1].op is Operation.SET
        return names(self.updates[-1].pods)


async def test_every_change_and_every_period_is_a_full_set(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(manifest("a"))
    h = Harness(tmp_path)
    await h.start()
    assert h.last() == ["a-node-1"]
    assert h.updates[-1].origins == {h.updates[-1].pods[0]["metadata"]["uid"]: str(tmp_path / "a.yaml")}
    (tmp_path / "b.yaml").write_text(manifest("b"))
    h.watcher.fire()
    await h.settle(reads=2)
    assert h.last() == ["a-node-1", "b-node-1"]
    (tmp_path / "a.yaml").unlink()
    h.watcher.batches.put_nowait(set())  # the period passed without an event: a full read all the same
    await h.settle(reads=3)
    assert h.last() == ["b-node-1"]
    await h.stop()
    assert h.watcher.closed == 1


async def test_a_bad_manifest_is_reported_once_until_it_changes(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(manifest("good"))
    (tmp_path / "bad.yaml").write_text("kind: [")
    h = Harness(tmp_path)
    await h.start()
    assert h.last() == ["good-node-1"]  # the valid pod is used all the same
    assert [Path(p.origin).name for p in h.problems] == ["bad.yaml"]
    for reads in (2, 3):
        h.watcher.fire()
        await h.settle(reads=reads)
    assert len(h.problems) == 1  # the same problem again is not reported again
    (tmp_path / "bad.yaml").write_text(manifest("bad", image=""))
    h.watcher.fire()
    await h.settle(reads=4)
    assert len(h.problems) == 2 and "image: Required value" in h.problems[-1].message
    await h.stop()


async def test_a_missing_directory_is_an_empty_set_and_is_watched_for_again(tmp_path: Path) -> None:
    path = tmp_path / "manifests"
    h = Harness(path)
    await h.start()
    assert h.updates == [SourceUpdate("file", Operation.SET, ())]  # the source counts as seen
    assert h.watcher.watches == 0
    path.mkdir()
    (path / "a.yaml").write_text(manifest("a"))
    await h.clock.advance(1.0)  # the first retry after 1 s
    await h.settle(reads=2)
    assert h.last() == ["a-node-1"]
    assert h.watcher.watches == 1
    # The directory goes away while watched: an empty SET, then it is looked for with a backoff.
    (path / "a.yaml").unlink()
    path.rmdir()
    h.watcher.fire()
    await h.settle(reads=3)
    assert h.last() == []
    assert h.watcher.closed == 1
    await h.clock.advance(1.0)
    await h.settle(reads=4)
    await h.clock.advance(1.0)
    await h.settle()
    assert h.source.reads == 4  # the backoff doubled: 2 s now
    await h.clock.advance(1.0)
    await h.settle(reads=5)
    assert h.source.reads == 5 and h.watcher.watches == 1
    await h.stop()


async def test_a_replaced_directory_is_watched_anew(tmp_path: Path) -> None:
    path = tmp_path / "manifests"
    path.mkdir()
    h = Harness(path)
    await h.start()
    path.rename(tmp_path / "old")
    path.mkdir()
    (path / "a.yaml").write_text(manifest("a"))
    h.watcher.batches.put_nowait(set())  # the old watch sees nothing of the new directory: the period passes
    await h.settle(reads=2)
    assert h.last() == ["a-node-1"]
    await h.settle()
    assert h.watcher.watches == 2  # watching the new directory
    assert h.watcher.closed == 1
    await h.stop()


async def test_an_unreadable_path_keeps_the_pods_and_a_failing_watch_falls_back_to_the_period(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    h = Harness(fifo)
    await h.start()
    assert h.updates == []  # nothing pushed: the source has not reported, nothing is removed
    assert h.source.reads == 1
    fifo.unlink()
    fifo.mkdir()
    h.watcher.fail = OSError("inotify watch limit reached")
    await h.clock.advance(1.0)
    await h.settle(reads=2)
    assert h.last() == []
    assert h.watcher.watches == 1
    await h.clock.advance(19.0)
    await h.settle()
    assert h.source.reads == 2  # after a failed watch, the next read waits one period
    await h.clock.advance(1.0)
    await h.settle(reads=3)
    assert h.watcher.watches == 2
    await h.stop()


async def test_the_real_watcher_sees_a_new_file_without_waiting_for_the_period(tmp_path: Path) -> None:
    changes: asyncio.Queue[set[Any]] = asyncio.Queue()

    async def follow() -> None:
        async for batch in watch_path(str(tmp_path), 600_000):
            changes.put_nowait(batch)

    task = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.3)  # let inotify set up its watch
        (tmp_path / "a.yaml").write_text(manifest("a"))
        (tmp_path / ".hidden").write_text("x")
        batch = await asyncio.wait_for(changes.get(), timeout=30)
        assert {Path(path).name for _, path in batch} == {"a.yaml"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
