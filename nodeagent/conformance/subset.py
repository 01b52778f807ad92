"""Fixed selections of specs by their full text, for `nodeagent conformance --subset NAME`.

`ci` is what `.ci/run` runs on every change: pods, init containers, /etc/hosts, probes, volumes of every kind, logs
and exec, about two minutes on a fresh testbed. The full `[NodeConformance]` run is documented in
docs/conformance.md and runs before an issue that touches pod behaviour is resolved.

A subset is run with a focus made of its names, and the run must hold exactly that many specs: a spec renamed
upstream would otherwise drop out of the selection without a word.
"""

from __future__ import annotations

CI: tuple[str, ...] = (
    # pods
    "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
    "[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
    "[sig-node] Pods should be updated [NodeConformance] [Conformance]",
    "[sig-node] Pods should contain environment variables for services [NodeConformance] [Conformance]",
    "[sig-node] InitContainer [NodeConformance] should invoke init containers on a RestartNever pod [Conformance]",
    "[sig-node] Container Runtime blackbox test when starting a container that exits should run with the expected "
    "status [NodeConformance] [Conformance]",
    "[sig-node] KubeletManagedEtcHosts should test kubelet managed /etc/hosts file [NodeConformance] [Conformance]",
    "[sig-node] Kubelet when scheduling an agnhost Pod with hostAliases should write entries to /etc/hosts "
    "[NodeConformance] [Conformance]",
    "[sig-node] Downward API should provide pod name, namespace and IP address as env vars [NodeConformance] "
    "[Conformance]",
    "[sig-node] Security Context When creating a container with runAsUser should run the container with uid 65534 "
    "[LinuxOnly] [NodeConformance] [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http "
    "[NodeConformance] [Conformance]",
    "[sig-node] ConfigMap should be consumable via the environment [NodeConformance] [Conformance]",
    # probes
    "[sig-node] Probing container should be restarted with a /healthz http liveness probe [NodeConformance] "
    "[Conformance]",
    "[sig-node] Probing container with readiness probe should not be ready before initial delay and never restart "
    "[NodeConformance] [Conformance]",
    # volumes
    "[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]",
    "[sig-storage] Secrets should be consumable from pods in volume with mappings and Item Mode set [LinuxOnly] "
    "[NodeConformance] [Conformance]",
    "[sig-storage] Projected combined should project all components that make up the projection API [Projection] "
    "[NodeConformance] [Conformance]",
    "[sig-storage] Downward API volume should update labels on modification [NodeConformance] [Conformance]",
    "[sig-storage] EmptyDir volumes should support (non-root,0666,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
    "[sig-storage] HostPath should support subPath [NodeConformance]",
    # logs
    "[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs "
    "[NodeConformance] [Conformance]",
    "[sig-node] Pods should support retrieving logs from the container over websockets [NodeConformance] [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message from log "
    "output if TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
    # exec
    "[sig-node] Pods should support remote command execution over websockets [NodeConformance] [Conformance]",
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook "
    "properly [NodeConformance] [Conformance]",
    "[sig-node] Ephemeral Containers [NodeConformance] will start an ephemeral container in an existing pod "
    "[Conformance]",
)

SUBSETS: dict[str, tuple[str, ...]] = {"ci": CI}

# RE2 (ginkgo's regexp) rejects escapes of characters that are not punctuation (`\ `), so escape only these.
_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def escape(text: str) -> str:
    """`text` as an RE2 pattern that matches it literally."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


def focus(names: tuple[str, ...]) -> str:
    """A ginkgo --focus that selects exactly the specs with these full texts (and any text that contains one)."""
    return "|".join(escape(name) for name in names)
