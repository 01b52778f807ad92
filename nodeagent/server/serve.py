"""Running the kubelet API from the agent's config: TLS material, the authenticator and authorizer (webhooks through
the node's own credential, which the system:node role lets create TokenReviews and SubjectAccessReviews), and the
server's lifetime as a supervised task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodeagent.config import KubeletConfiguration
from nodeagent.config.kubelet_config import AuthorizationMode
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.server.auth import Authenticator, Authorizer
from nodeagent.server.http import HTTPServer
from nodeagent.server.server import KubeletServer
from nodeagent.server.tls import self_signed_pair

log = logging.getLogger(__name__)


def build_auth(config: KubeletConfiguration, client: KubeClient | None) -> tuple[Authenticator, Authorizer]:
    """Upstream BuildAuth: webhook authentication and authorization need an apiserver; without one (standalone) a
    token cannot be reviewed and Webhook authorization denies nothing it cannot ask about, so it is refused."""
    authn = config.authentication
    review = None
    if authn.webhook.enabled and client is not None:
        api = client

        async def review(token: str) -> Mapping[str, Any]:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
            answer = await api.create(paths.api_path("tokenreviews", group="authentication.k8s.io"), body)
            status: Mapping[str, Any] = answer.get("status") or {}
            return status

    access = None
    if config.authorization.mode is AuthorizationMode.WEBHOOK:
        if client is None:

            async def access(spec: Mapping[str, Any]) -> Mapping[str, Any]:
                return {"allowed": False, "reason": "no apiserver to authorize against"}

        else:
            api_authz = client

            async def access(spec: Mapping[str, Any]) -> Mapping[str, Any]:
                body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": dict(spec)}
                answer = await api_authz.create(
                    paths.api_path("subjectaccessreviews", group="authorization.k8s.io"), body
                )
                status: Mapping[str, Any] = answer.get("status") or {}
                return status

    authenticator = Authenticator(
        token_review=review,
        cache_ttl=authn.webhook.cache_ttl.total_seconds(),
        anonymous=authn.anonymous.enabled,
    )
    authorizer = Authorizer(
        access_review=access,
        authorized_ttl=config.authorization.webhook.cache_authorized_ttl.total_seconds(),
        unauthorized_ttl=config.authorization.webhook.cache_unauthorized_ttl.total_seconds(),
    )
    return authenticator, authorizer


def serving_files(
    config: KubeletConfiguration, root_dir: Path, hostname: str, addresses: Sequence[str]
) -> tuple[Path, Path]:
    if config.tls_cert_file and config.tls_private_key_file:
        return Path(config.tls_cert_file), Path(config.tls_private_key_file)
    return self_signed_pair(root_dir / "pki", hostname, addresses)


async def run_server(server: KubeletServer, http: HTTPServer, *, address: str, port: int) -> None:
    """Listen (retrying a taken port every 5 s, as the local endpoint does) and serve until cancelled."""
    while True:
        try:
            bound = await http.listen(address, port)
            break
        except OSError as exc:
            log.warning("kubelet api cannot listen address=%s port=%d error=%s retry_in=5s", address, port, exc)
            await asyncio.sleep(5)
    log.info("kubelet api listening address=%s port=%d", address, bound)
    try:
        await asyncio.Event().wait()
    finally:
        await http.close()
        log.info("kubelet api stopped active_streams=%d", server.active_streams)
