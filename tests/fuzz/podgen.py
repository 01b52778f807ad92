"""Schema-shaped pods: every field has the type the v1 Pod schema gives it, the values are odd (empty, huge, at the
int32/int64 bounds, quantities of every form, names of any characters). What an apiserver may hand the agent, and
the raw material the manifest target mutates further."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.fuzz.strategies import int64s, odd_strings, strings

names = st.one_of(st.sampled_from(["web", "app", "c", "sidecar", "init"]), strings)
int32s = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
_QUANTITY_FORMS = st.one_of(
    st.sampled_from(
        ["0", "1", "100m", "0.5", "1Gi", "128Mi", "1e3", "1E", "2Ei", "1n", "1u", "1e-9", ".5", "1.", "-1"]
    ),
    st.builds(
        lambda n, s: f"{n}{s}",
        st.one_of(st.integers(0, 10**30), st.decimals(allow_nan=False, allow_infinity=False, places=4).map(str)),
        st.sampled_from(["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e308", "e-308"]),
    ),
    st.sampled_from(["1e999999", "9" * 300 + "Ei", "1e-999999", "0.000000000000000000001"]),
)


def pod_strategy(quantities: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Pods whose resource quantities come from `quantities`."""
    resources = st.dictionaries(
        st.sampled_from(["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu", "pods"]), quantities
    )
    protocols = st.sampled_from(["TCP", "UDP", "SCTP", "", "tcp"])
    _field_paths = st.sampled_from(
        [
            "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['a']", "metadata.annotations['b']",
            "metadata.labels", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs",
            "status.podIP", "status.podIPs", "metadata.labels['", "']", "spec.x", "",
        ]
    )  # fmt: skip
    _resource_names = st.sampled_from(
        ["limits.cpu", "limits.memory", "requests.cpu", "requests.memory", "limits.ephemeral-storage", "limits.x", ""]
    )
    _key_ref = st.fixed_dictionaries({"name": names, "key": strings}, optional={"optional": st.booleans()})
    _value_from: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.fixed_dictionaries({"fieldRef": st.fixed_dictionaries({"fieldPath": _field_paths})}),
        st.fixed_dictionaries(
            {
                "resourceFieldRef": st.fixed_dictionaries(
                    {"resource": _resource_names}, optional={"divisor": quantities, "containerName": names}
                )
            }
        ),
        st.fixed_dictionaries({"configMapKeyRef": _key_ref}),
        st.fixed_dictionaries({"secretKeyRef": _key_ref}),
        st.just({}),
    )
    env_vars = st.one_of(
        st.fixed_dictionaries({"name": strings}, optional={"value": strings}),
        st.fixed_dictionaries({"name": strings, "valueFrom": _value_from}),
    )
    _ref = st.fixed_dictionaries({"name": names}, optional={"optional": st.booleans()})
    env_from = st.fixed_dictionaries({}, optional={"prefix": strings, "configMapRef": _ref, "secretRef": _ref})
    ports = st.fixed_dictionaries(
        {"containerPort": int32s},
        optional={
            "hostPort": int32s,
            "protocol": protocols,
            "name": strings,
            "hostIP": st.sampled_from(["", "::1", "x"]),
        },
    )
    _port_ref = st.one_of(int32s, strings)
    _handler = st.one_of(
        st.fixed_dictionaries({"exec": st.fixed_dictionaries({}, optional={"command": st.lists(strings, max_size=3)})}),
        st.fixed_dictionaries(
            {"httpGet": st.fixed_dictionaries({"port": _port_ref}, optional={"path": strings, "host": strings})}
        ),
        st.fixed_dictionaries({"tcpSocket": st.fixed_dictionaries({"port": _port_ref})}),
        st.fixed_dictionaries({"grpc": st.fixed_dictionaries({"port": int32s}, optional={"service": strings})}),
        st.fixed_dictionaries({"sleep": st.fixed_dictionaries({"seconds": int64s})}),
        st.just({}),
    )
    probes = st.builds(
        lambda handler, extra: {**handler, **extra},
        _handler,
        st.fixed_dictionaries(
            {},
            optional={
                k: int32s
                for k in (
                    "initialDelaySeconds",
                    "timeoutSeconds",
                    "periodSeconds",
                    "successThreshold",
                    "failureThreshold",
                )
            }
            | {"terminationGracePeriodSeconds": int64s},
        ),
    )
    seccomp = st.fixed_dictionaries(
        {"type": st.sampled_from(["RuntimeDefault", "Localhost", "Unconfined", "", "Other"])},
        optional={"localhostProfile": strings},
    )
    security_context = st.fixed_dictionaries(
        {},
        optional={
            "runAsUser": int64s,
            "runAsGroup": int64s,
            "runAsNonRoot": st.booleans(),
            "privileged": st.booleans(),
            "allowPrivilegeEscalation": st.booleans(),
            "readOnlyRootFilesystem": st.booleans(),
            "capabilities": st.fixed_dictionaries(
                {}, optional={"add": st.lists(strings, max_size=3), "drop": st.lists(strings, max_size=3)}
            ),
            "seccompProfile": seccomp,
            "procMount": st.sampled_from(["Default", "Unmasked", ""]),
        },
    )
    containers = st.fixed_dictionaries(
        {"name": names, "image": st.one_of(st.sampled_from(["busybox", "busybox:1.35", "r/x@sha256:ab"]), strings)},
        optional={
            "command": st.lists(strings, max_size=3),
            "args": st.lists(strings, max_size=3),
            "workingDir": strings,
            "env": st.lists(env_vars, max_size=4),
            "envFrom": st.lists(env_from, max_size=2),
            "ports": st.lists(ports, max_size=3),
            "resources": st.fixed_dictionaries({}, optional={"requests": resources, "limits": resources}),
            "securityContext": security_context,
            "livenessProbe": probes,
            "readinessProbe": probes,
            "startupProbe": probes,
            "lifecycle": st.fixed_dictionaries({}, optional={"postStart": _handler, "preStop": _handler}),
            "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never", ""]),
            "restartPolicy": st.sampled_from(["Always", ""]),
            "stdin": st.booleans(),
            "stdinOnce": st.booleans(),
            "tty": st.booleans(),
            "terminationMessagePath": strings,
            "terminationMessagePolicy": st.sampled_from(["File", "FallbackToLogsOnError", ""]),
            "volumeMounts": st.lists(
                st.fixed_dictionaries({"name": names, "mountPath": strings}, optional={"subPath": strings}), max_size=2
            ),
        },
    )
    _labels = st.dictionaries(strings, strings, max_size=4)
    _toleration = st.fixed_dictionaries(
        {},
        optional={
            "key": strings,
            "operator": st.sampled_from(["Exists", "Equal", ""]),
            "value": strings,
            "effect": st.sampled_from(["NoExecute", "NoSchedule", "PreferNoSchedule", ""]),
            "tolerationSeconds": int64s,
        },
    )
    _requirement = st.fixed_dictionaries(
        {"key": strings, "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "X"])},
        optional={"values": st.lists(strings, max_size=3)},
    )
    _affinity = st.fixed_dictionaries(
        {
            "nodeAffinity": st.fixed_dictionaries(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                        {
                            "nodeSelectorTerms": st.lists(
                                st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "matchExpressions": st.lists(_requirement, max_size=2),
                                        "matchFields": st.lists(_requirement, max_size=2),
                                    },
                                ),
                                max_size=2,
                            )
                        }
                    )
                }
            )
        }
    )
    volumes = st.fixed_dictionaries(
        {"name": names},
        optional={
            "emptyDir": st.fixed_dictionaries(
                {}, optional={"medium": st.sampled_from(["", "Memory"]), "sizeLimit": quantities}
            ),
            "hostPath": st.fixed_dictionaries({"path": strings}, optional={"type": strings}),
            "configMap": st.fixed_dictionaries({"name": names}),
            "secret": st.fixed_dictionaries({"secretName": names}),
        },
    )
    pod_specs = st.fixed_dictionaries(
        {"containers": st.lists(containers, max_size=3)},
        optional={
            "initContainers": st.lists(containers, max_size=2),
            "ephemeralContainers": st.lists(containers, max_size=1),
            "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never", ""]),
            "dnsPolicy": st.sampled_from(["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None", ""]),
            "dnsConfig": st.fixed_dictionaries(
                {},
                optional={
                    "nameservers": st.lists(strings, max_size=4),
                    "searches": st.lists(strings, max_size=8),
                    "options": st.lists(
                        st.fixed_dictionaries({"name": strings}, optional={"value": strings}), max_size=3
                    ),
                },
            ),
            "hostNetwork": st.booleans(),
            "hostPID": st.booleans(),
            "hostIPC": st.booleans(),
            "shareProcessNamespace": st.booleans(),
            "hostname": strings,
            "subdomain": strings,
            "setHostnameAsFQDN": st.booleans(),
            "nodeName": st.sampled_from(["node", "", "other"]),
            "nodeSelector": _labels,
            "affinity": _affinity,
            "tolerations": st.lists(_toleration, max_size=3),
            "priority": int32s,
            "priorityClassName": strings,
            "runtimeClassName": strings,
            "overhead": resources,
            "os": st.fixed_dictionaries({"name": st.sampled_from(["linux", "windows", ""])}),
            "terminationGracePeriodSeconds": int64s,
            "activeDeadlineSeconds": int64s,
            "enableServiceLinks": st.booleans(),
            "serviceAccountName": strings,
            "volumes": st.lists(volumes, max_size=3),
            "securityContext": st.fixed_dictionaries(
                {},
                optional={
                    "runAsUser": int64s,
                    "runAsGroup": int64s,
                    "runAsNonRoot": st.booleans(),
                    "fsGroup": int64s,
                    "supplementalGroups": st.lists(int64s, max_size=3),
                    "sysctls": st.lists(st.fixed_dictionaries({"name": strings, "value": strings}), max_size=3),
                    "seccompProfile": seccomp,
                },
            ),
        },
    )
    pods = st.fixed_dictionaries(
        {
            "apiVersion": st.just("v1"),
            "kind": st.just("Pod"),
            "metadata": st.fixed_dictionaries(
                {
                    "name": names,
                    "namespace": st.one_of(st.just("default"), strings),
                    "uid": st.one_of(st.uuids().map(str), strings),
                },
                optional={
                    "labels": _labels,
                    "annotations": _labels,
                    "deletionTimestamp": st.just("2026-01-01T00:00:00Z"),
                },
            ),
            "spec": pod_specs,
        },
        optional={
            "status": st.fixed_dictionaries(
                {}, optional={"phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown", ""])}
            )
        },
    )

    return pods


# Manifests: any quantity text (the static pod validation must refuse the bad ones). API pods: the apiserver only
# stores quantities of the grammar that are not negative, however large.
pods = pod_strategy(st.one_of(_QUANTITY_FORMS, odd_strings))
api_pods = pod_strategy(_QUANTITY_FORMS.filter(lambda q: not q.startswith("-")))


def minimal_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.35", "command": ["sleep", "3600"]}]},
    }
