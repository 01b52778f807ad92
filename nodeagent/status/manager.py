"""`StatusManager`: keeps the latest pod status per UID and patches it to the apiserver (pkg/kubelet/status).

Producers (the pod workers) never wait on the apiserver: `set_pod_status` stores the status under a version number
and wakes the sync task, which sends every status whose version the apiserver has not confirmed yet, as soon as it
is woken and again every `sync_period` (so a failure is retried without a new status having to arrive).

What is sent is a strategic merge patch from the status the apiserver last showed us (the answer to our previous
patch, or the pod's status when we first heard of it) to the new one, carrying metadata.uid as a precondition, as
`statusutil.PatchPodStatus` does: a pod deleted and recreated under the same name never receives the old pod's
status. Conditions the kubelet does not own are left as the apiserver has them (upstream mergePodStatus), and the
patch names only the conditions it changes, so a readiness gate set meanwhile by someone else is never undone.

The errors, as the upstream syncPod treats them:

- NotFound: the pod is gone; its status stays readable here (a terminating worker still reads it) but is never
  sent again, until `remove_orphans` forgets it.
- Conflict or another refusal: GET the pod; a different UID (or none) means ours is gone, otherwise its status is
  the new base and the patch is retried next round. (A UID mismatch comes back as 422 Invalid, "metadata.uid: field
  is immutable", from the real apiserver, not as 409: both take this path.)
- ApiUnavailable: retried next round.

One pod's failure never stops the others from being sent. With no client (standalone mode) statuses are only kept.

Every status kept carries observedGeneration, the pod's metadata.generation (never lower than the one it had), as
upstream's SetPodStatus. A terminal phase reaches the apiserver only once `could_have_running_containers` (the pod
workers' view, upstream PodDeletionSafetyProvider) says nothing of the pod can run any more: until then the patch
keeps the phase the apiserver shows, and the status stays unconfirmed so that it goes out in full when the worker
has finished terminating the pod (the next status set for it wakes the sync task, even if it is the same one).

A static pod's status goes to its mirror pod (upstream: TranslatePodUID). `pod_api_uid` names the API object that
carries a pod's status: the pod itself, a static pod's current mirror, or none yet. The patch's UID precondition is
that object's UID; a status waits while there is none; and when the object changes (a mirror deleted and created
again) the new one is read and the status sent to it, even if the status itself did not change.

Reconcile (upstream's needsReconcile, every `sync_period`): `pod_api_status` is the pod's status as the pod sources
last saw it in the apiserver. When it no longer agrees with the status kept here (someone else wrote it: the node
lifecycle controller marks every pod of a node it has not heard from not Ready), the pod is read and the kept status
sent again, though it did not change here: the kubelet is the source of truth of the pod's status. Each status the
sources hand over is compared once (kept by identity: the pod config hands out a new object for a new status).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.clock import Clock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ApiUnavailable, NotFound
from nodeagent.status._common import JSON, pod_generation
from nodeagent.status.compare import is_stale, merge_pod_status, needs_update, status_patch
from nodeagent.status.probe_results import with_probe_result

log = logging.getLogger(__name__)

DEFAULT_SYNC_PERIOD = 10.0  # upstream's syncPeriod


@dataclass
class _Entry:
    namespace: str
    name: str
    uid: str
    status: JSON  # the latest status the kubelet set
    version: int  # bumped by every accepted set_pod_status
    api_status: JSON  # the status the apiserver last showed us: the base of the next merge patch
    synced_version: int = 0  # the version the apiserver has confirmed
    refresh: bool = False  # GET the pod before the next patch (after a refusal whose GET failed)
    gone: bool = False  # the pod with this UID no longer exists in the apiserver: never send again
    api_uid: str = ""  # the UID of the API object the status goes to (a static pod's mirror; else `uid`)
    waiting: bool = False  # no API object carries this pod's status yet (a static pod without its mirror)
    compared: object = None  # the sources' API status last compared with ours (reconcile), kept by identity

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def dirty(self) -> bool:
        return not self.gone and not self.waiting and self.synced_version < self.version


def _metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def with_observed_generation(status: Mapping[str, Any], pod: Mapping[str, Any], old: Mapping[str, Any]) -> JSON:
    """`status` with observedGeneration the pod's generation, never below `old`'s (upstream SetPodStatus with
    PodObservedGenerationTracking, then updateStatusInternal's "prevent sending unnecessary patches"); unset while
    both are 0."""
    out = dict(status)
    old_value = old.get("observedGeneration")
    generation = max(pod_generation(pod), old_value if isinstance(old_value, int) else 0)
    if generation > 0:
        out["observedGeneration"] = generation
    else:
        out.pop("observedGeneration", None)
    return out


def _status_of(pod: Mapping[str, Any]) -> JSON:
    status = pod.get("status")
    return copy.deepcopy(dict(status)) if isinstance(status, Mapping) else {}


class StatusManager:
    """The latest status of every pod on the node, sent to the apiserver by the task `run()`."""

    def __init__(
        self,
        client: KubeClient | None,
        *,
        clock: Clock,
        sync_period: float = DEFAULT_SYNC_PERIOD,
        pod_api_uid: Callable[[str], str | None] | None = None,
        could_have_running_containers: Callable[[str], bool] | None = None,
        pod_api_status: Callable[[str], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self._client = client
        self._clock = clock
        self._sync_period = sync_period
        self._pod_api_uid = pod_api_uid
        # By pod UID: whether its containers may still run (set once the pod workers exist); None: never.
        self.could_have_running_containers = could_have_running_containers
        # By the UID of the API object: its status as the pod sources last saw it; None: no reconcile.
        self._pod_api_status = pod_api_status
        self._next_reconcile = 0.0
        self.reconciled = 0  # statuses sent again because the apiserver's differed (someone else wrote it)
        self._entries: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        self.patches_sent = 0  # status patches sent to the apiserver, whatever their outcome

    # --- producers (never block) ------------------------------------------------------------------------------

    def set_pod_status(self, pod: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Keep `status` as the pod's latest, unless it would move the pod backwards, and wake the sync task."""
        meta = _metadata(pod)
        uid = str(meta.get("uid") or "")
        if not uid:
            log.error("pod status ignored: the pod has no uid pod=%s/%s", meta.get("namespace"), meta.get("name"))
            return
        entry = self._entries.get(uid)
        old = entry.status if entry is not None else _status_of(pod)
        status = with_observed_generation(status, pod, old)
        spec = pod.get("spec")
        # The old status is the apiserver's, or the one kept here; a terminal phase kept here but not sent yet may
        # still turn into the other terminal phase (a kill's Failed, then Succeeded from how the containers ended).
        sent = entry is None or entry.api_status.get("phase") == old.get("phase")
        if is_stale(old, status, pod_spec=spec if isinstance(spec, Mapping) else None, old_sent=sent):
            # As upstream's checkContainerStateTransition and terminal-phase guard: keep the old status.
            log.warning(
                "pod status refused, it would move the pod backwards pod=%s/%s uid=%s old_phase=%s new_phase=%s",
                meta.get("namespace"),
                meta.get("name"),
                uid,
                old.get("phase"),
                status.get("phase"),
            )
            return
        if entry is not None and not needs_update(entry.status, status):
            if entry.dirty or (self._pod_api_uid is not None and self._pod_api_uid(uid) != entry.api_uid):
                # The same status, but not all of it went out (a terminal phase held back) or a new API object
                # must carry it (a recreated mirror pod): as upstream's forced update, send it again.
                self._wake.set()
            return  # the same status again (times aside): nothing new to send
        new = copy.deepcopy(dict(status))
        if entry is None:
            self._entries[uid] = _Entry(
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                uid=uid,
                status=new,
                version=1,
                api_status=_status_of(pod),
                api_uid=uid,
            )
        else:
            entry.status = new
            entry.version += 1
        self._wake.set()

    def set_container_readiness(self, pod: Mapping[str, Any], container_id: str, ready: bool) -> None:
        """A readiness verdict, applied to the latest status at once (upstream SetContainerReadiness)."""
        self._apply_probe_result(pod, container_id, ready=ready)

    def set_container_startup(self, pod: Mapping[str, Any], container_id: str, started: bool) -> None:
        """A startup verdict, applied to the latest status at once (upstream SetContainerStartup)."""
        self._apply_probe_result(pod, container_id, started=started)

    def _apply_probe_result(
        self, pod: Mapping[str, Any], container_id: str, *, ready: bool | None = None, started: bool | None = None
    ) -> None:
        entry = self._entries.get(str(_metadata(pod).get("uid") or ""))
        if entry is None:
            return  # no status yet: the pod's first sync generates one with the prober's view
        spec = pod.get("spec")
        new = with_probe_result(
            spec if isinstance(spec, Mapping) else {},
            entry.status,
            container_id,
            now=self._clock.wall(),
            ready=ready,
            started=started,
            generation=pod_generation(pod),
        )
        if new is not None:
            self.set_pod_status(pod, new)

    def get_pod_status(self, uid: str) -> JSON | None:
        """The latest status set for the pod (a copy), sent or not."""
        entry = self._entries.get(uid)
        return copy.deepcopy(entry.status) if entry is not None else None

    def pod_status_view(self, uid: str) -> Mapping[str, Any] | None:
        """`get_pod_status` without the copy, for a reader that only looks (a new status replaces the kept one, it
        is never edited in place): whether a pod is active is asked of every pod at every pod sync."""
        entry = self._entries.get(uid)
        return entry.status if entry is not None else None

    def remove_orphans(self, known_uids: set[str]) -> None:
        """Forget the pods that are no longer known (upstream's RemoveOrphanedStatuses)."""
        for uid in [uid for uid in self._entries if uid not in known_uids]:
            log.debug("pod status forgotten uid=%s pod=%s", uid, self._entries[uid].ref)
            del self._entries[uid]

    # --- the sync task ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Send what changed when woken, and retry what is still unsent every sync_period. Runs until cancelled."""
        log.info("status manager started sync_period=%s standalone=%s", self._sync_period, self._client is None)
        while True:
            await self._wait(self._sync_period)
            self._wake.clear()
            await self.sync_once()

    async def _wait(self, seconds: float) -> None:
        if self._wake.is_set():
            return
        waker = asyncio.ensure_future(self._wake.wait())
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait({waker, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, sleeper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def sync_once(self) -> None:
        """One round: send every status the apiserver has not confirmed; a pod's failure only skips that pod."""
        if self._client is None:
            return
        for entry in list(self._entries.values()):
            self._retarget(entry)
        if self._pod_api_status is not None and self._clock.monotonic() >= self._next_reconcile:
            self._next_reconcile = self._clock.monotonic() + self._sync_period
            for entry in self._entries.values():
                self._reconcile(entry)
        for entry in [e for e in self._entries.values() if e.dirty]:
            try:
                await self._sync_pod(self._client, entry)
            except Exception:
                log.exception("pod status sync failed pod=%s uid=%s", entry.ref, entry.uid)

    def _reconcile(self, entry: _Entry) -> None:
        """Upstream's needsReconcile: a status the apiserver shows that differs from ours is sent again."""
        if self._pod_api_status is None or entry.dirty or entry.gone or entry.waiting:
            return
        seen = self._pod_api_status(entry.api_uid)
        if seen is None or seen is entry.compared:
            return
        entry.compared = seen
        could_run = self.could_have_running_containers is not None and self.could_have_running_containers(entry.uid)
        ours = merge_pod_status(seen, entry.status, could_have_running_containers=could_run, now=self._clock.wall())
        if not needs_update(seen, ours):
            return
        log.info("pod status differs from the apiserver's, sending it again pod=%s uid=%s", entry.ref, entry.uid)
        self.reconciled += 1
        entry.refresh = True  # the apiserver's status is the base of the patch
        entry.synced_version = 0

    def _retarget(self, entry: _Entry) -> None:
        """Follow the API object that carries the pod's status (a static pod's mirror comes and goes)."""
        if self._pod_api_uid is None:
            return
        target = self._pod_api_uid(entry.uid)
        entry.waiting = target is None
        if target is None or target == entry.api_uid:
            return
        log.debug("pod status target changed pod=%s uid=%s api_uid=%s", entry.ref, entry.uid, target)
        entry.api_uid = target
        entry.gone = False
        entry.refresh = True  # read the new object's status: the base of the next patch
        entry.synced_version = 0  # and send the status to it even if it did not change

    async def _sync_pod(self, client: KubeClient, entry: _Entry) -> None:
        if entry.refresh and not await self._refresh(client, entry):
            return
        version = entry.version
        # Conditions others own (readiness gates) stay as the apiserver has them: the kubelet never writes them.
        could_run = self.could_have_running_containers is not None and self.could_have_running_containers(entry.uid)
        status = merge_pod_status(
            entry.api_status, entry.status, could_have_running_containers=could_run, now=self._clock.wall()
        )
        # A terminal phase held back: the status is not all sent, so it stays unconfirmed.
        held = status.get("phase") != entry.status.get("phase")
        if held:
            log.debug("pod terminal phase held back, containers may run pod=%s uid=%s", entry.ref, entry.uid)
        if not needs_update(entry.api_status, status):
            if not held:
                entry.synced_version = version  # the apiserver already says this
            return
        patch = status_patch(entry.api_status, status, uid=entry.api_uid)
        self.patches_sent += 1
        try:
            answer = await client.patch(
                paths.pod(entry.namespace, entry.name), patch, patch_type="strategic", subresource="status"
            )
        except NotFound:
            log.info("pod status not sent, the pod is gone pod=%s uid=%s", entry.ref, entry.uid)
            entry.gone = True
            return
        except ApiUnavailable as exc:
            log.warning("pod status not sent, will retry pod=%s uid=%s error=%s", entry.ref, entry.uid, exc)
            return
        except ApiError as exc:
            # A Conflict (the UID precondition: the pod was recreated) or another refusal: look at the pod again.
            log.warning("pod status refused, will look again pod=%s uid=%s error=%s", entry.ref, entry.uid, exc)
            entry.refresh = True
            await self._refresh(client, entry)
            return
        entry.api_status = _status_of(answer)
        if not held:
            entry.synced_version = version
        log.debug(
            "pod status sent pod=%s uid=%s version=%d phase=%s", entry.ref, entry.uid, version, status.get("phase")
        )

    async def _refresh(self, client: KubeClient, entry: _Entry) -> bool:
        """GET the pod: the apiserver's status becomes the base. False when the pod is gone or the GET failed."""
        try:
            pod = await client.get(paths.pod(entry.namespace, entry.name))
        except NotFound:
            pod = None
        except (ApiUnavailable, ApiError) as exc:
            log.warning("pod not read, will retry pod=%s uid=%s error=%s", entry.ref, entry.uid, exc)
            return False
        entry.refresh = False
        if pod is None or _metadata(pod).get("uid") != entry.api_uid:
            # As upstream: "Pod was deleted and then recreated, skipping status update".
            log.info("pod status not sent, the pod is gone or was recreated pod=%s uid=%s", entry.ref, entry.uid)
            entry.gone = True
            return False
        entry.api_status = _status_of(pod)
        return True
