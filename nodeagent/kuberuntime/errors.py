"""The runtime manager's exception tree.

`KubeRuntimeError` is the root. Each subclass carries the `reason` upstream reports in the container's waiting state
or in an event, so a caller maps an exception to a pod status without a lookup table.
"""

from __future__ import annotations


class KubeRuntimeError(Exception):
    """Root of the errors raised by `nodeagent.kuberuntime`."""

    reason = "KubeRuntimeError"


class CreateContainerConfigError(KubeRuntimeError):
    """The container config could not be built (a missing ConfigMap key, a bad fieldRef, runAsNonRoot violated)."""

    reason = "CreateContainerConfigError"


class CreatePodSandboxConfigError(KubeRuntimeError):
    """The sandbox config could not be built (as upstream's CreatePodSandboxError reason)."""

    reason = "CreatePodSandboxError"


class LabelsError(KubeRuntimeError):
    """A runtime object lacks the labels the kubelet puts on what it creates, so it cannot be adopted."""

    reason = "LabelsError"
