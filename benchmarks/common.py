"""What every benchmark shares: the percentile they quote, the one-container pod they start, a run on a testbed of
its own, and the watch that follows a benchmark's pods."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Gone, KubeError
from nodeagent.testbed.testbed import Testbed

NS = "default"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 <= q <= 1); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def pod_body(name: str, image: str, *, bench: str) -> dict[str, Any]:
    """A busybox pod that sleeps, labelled bench=<bench> so a benchmark finds and deletes only its own pods."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": bench}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}
            ],
        },
    }


async def on_a_testbed(
    directory: Path | None, prefix: str, work: Callable[[Testbed], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """`work` on a testbed brought up in `directory` (None: a new temporary one, named `prefix`...) and down after it,
    whatever happens. A temporary directory is removed after a run that succeeded; after a failure its logs stay."""
    root = directory or Path(tempfile.mkdtemp(prefix=prefix))
    bed = Testbed(root)
    await bed.up()
    try:
        result = await work(bed)
    finally:
        with contextlib.suppress(Exception):
            await bed.down()
    if directory is None:
        shutil.rmtree(root, ignore_errors=True)
    return result


async def watch_pods(
    admin: KubeClient, record: Callable[[str, dict[str, Any]], Awaitable[None]], label_selector: str
) -> None:
    """Every event of the benchmark's pods (`label_selector` in NS) to `record(type, pod)` for the whole run, the
    listed ones as ADDED; a watch that ends or expires is resumed or relisted."""
    await watch_objects(admin, paths.pods(NS), record, label_selector)


async def watch_objects(
    admin: KubeClient, path: str, record: Callable[[str, dict[str, Any]], Awaitable[None]], label_selector: str
) -> None:
    """Every event of the collection at `path` that `label_selector` selects to `record(type, object)`, until
    cancelled: the listed ones as ADDED, then the watch's; a watch that ends or expires is resumed or relisted."""
    rv = ""
    while True:
        if not rv:
            listed = await admin.list(path, label_selector=label_selector)
            rv = listed["metadata"]["resourceVersion"]
            for item in listed["items"]:
                await record("ADDED", item)
        try:
            async for event in admin.watch(path, resource_version=rv, label_selector=label_selector):
                rv = event.resource_version or rv
                if event.type != "BOOKMARK":
                    await record(event.type, event.object)
        except Gone:
            rv = ""
        except KubeError:
            await asyncio.sleep(0.2)
