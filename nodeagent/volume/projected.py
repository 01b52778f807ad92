"""projected volumes (upstream pkg/volume/projected): several sources in one directory, on a tmpfs since tokens
and secrets are among them: serviceAccountToken, configMap, secret and downwardAPI. The ServiceAccount admission
adds one of these (`kube-api-access-*`: token, the `kube-root-ca.crt` ConfigMap's ca.crt, the namespace) to every
pod that does not opt out. Content follows the objects and the token's refresh on every resync; the errors of all
sources are reported together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.configmap import config_map_payload
from nodeagent.volume.downwardapi import collect_data
from nodeagent.volume.errors import SetUpError
from nodeagent.volume.layout import PROJECTED
from nodeagent.volume.ownership import pod_fs_group
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_name, pod_namespace, pod_uid
from nodeagent.volume.projection import (
    aggregate,
    default_mode,
    reconstruct_volume,
    tear_down_volume,
    write_volume,
)
from nodeagent.volume.secret import secret_payload
from nodeagent.volume.token import TokenKey, TokenManager

#: what the ServiceAccount admission puts in kube-api-access volumes (an hour plus 7 s, so the apiserver can tell
#: them apart); the API's own default for the field is 3600.
DEFAULT_EXPIRATION_SECONDS = 3607
MIN_EXPIRATION_SECONDS = 600


def token_key(pod: Pod, source: Mapping[str, Any]) -> TokenKey:
    expiration = int(source.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS)
    if expiration < MIN_EXPIRATION_SECONDS:
        raise SetUpError(
            f"serviceAccountToken expirationSeconds {expiration}: may not specify a duration less than 10 minutes"
        )
    audience = str(source.get("audience") or "")
    spec: Mapping[str, Any] = pod.get("spec") or {}
    return TokenKey(
        service_account=str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"),
        namespace=pod_namespace(pod),
        audiences=(audience,) if audience else (),
        expiration_seconds=expiration,
        pod_name=pod_name(pod),
        pod_uid=pod_uid(pod),
    )


class ProjectedPlugin:
    name = PROJECTED
    requires_remount = True
    read_only = True

    def __init__(self, host: VolumeHost, tokens: TokenManager) -> None:
        self._host = host
        self._tokens = tokens

    def can_support(self, volume: Volume) -> bool:
        return volume.get("projected") is not None

    async def collect(self, pod: Pod, volume: Volume) -> dict[str, FileProjection]:
        projected: Mapping[str, Any] = volume.get("projected") or {}
        mode = default_mode(projected)
        # The sources are fetched at once (the kube-api-access volume's TokenRequest and its CA ConfigMap are two
        # round trips to the apiserver), then merged in order: a later source's path wins, as upstream's loop.
        results = await asyncio.gather(
            *(self._source(pod, source, mode) for source in projected.get("sources") or []), return_exceptions=True
        )
        payload: dict[str, FileProjection] = {}
        errors: list[str] = []
        for result in results:
            if isinstance(result, SetUpError):
                errors.append(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                payload.update(result)
        if errors:
            raise SetUpError(aggregate(errors))
        return payload

    async def _source(self, pod: Pod, source: Mapping[str, Any], mode: int) -> dict[str, FileProjection]:
        namespace = pod_namespace(pod)
        if (secret := source.get("secret")) is not None:
            return await secret_payload(self._host, namespace, str(secret.get("name", "")), secret, mode)
        if (config_map := source.get("configMap")) is not None:
            return await config_map_payload(self._host, namespace, config_map, mode)
        if (downward := source.get("downwardAPI")) is not None:
            return collect_data(downward.get("items") or [], pod, self._host.node_allocatable, mode)
        if (sat := source.get("serviceAccountToken")) is not None:
            token = await self._tokens.get_token(token_key(pod, sat))
            # As upstream: with an fsGroup the token is 0600, and the ownership walk makes it 0640.
            token_mode = 0o600 if pod_fs_group(pod) is not None else mode
            return {str(sat.get("path", "")): FileProjection(token.encode(), token_mode)}
        kinds = ", ".join(sorted(str(k) for k in source)) or "empty"
        raise SetUpError(f"projected source {kinds} is not supported on this node")

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        payload = await self.collect(pod, volume)
        return await write_volume(self._host, PROJECTED, pod, volume, payload, memory=True)

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        await tear_down_volume(self._host, PROJECTED, pod_uid, volume_name)
        self._tokens.delete_pod_tokens(pod_uid)

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        return reconstruct_volume(self._host, PROJECTED, pod_uid, volume_name, memory=True)
