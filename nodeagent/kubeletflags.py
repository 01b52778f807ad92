"""The upstream kubelet's command line, as kubeadm's systemd drop-in and distributions pass it, mapped onto `nodeagent
run`: the `kubelet` console script.

kubeadm starts the kubelet as `kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
$KUBELET_EXTRA_ARGS` (10-kubeadm.conf): the first two are fixed, the third comes from
`/var/lib/kubelet/kubeadm-flags.env` and the last from `/etc/default/kubelet`. `drop_in_argv` rebuilds that argv
from the files, so that what kubeadm wrote starts nodeagent unchanged.

Parsing follows Go's pflag, which the kubelet uses: `--flag=value` and `--flag value`, `-v` as the shorthand of `--v`
(`-v 2`, `-v=2`, `-v2`), `_` read as `-` in names (the kubelet's word-separator normalization), the last of a repeated
flag wins, except `--node-labels`, whose repeats merge (cliflag.MapStringString). A flag nodeagent does not support is
an error that names it, as pflag's "unknown flag: --foo" (exit 1): a node must never run with a setting silently
dropped.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.config.kubelet_config import Taint, TaintEffect

KUBEADM_FLAGS_ENV = Path("/var/lib/kubelet/kubeadm-flags.env")
KUBELET_DEFAULTS = Path("/etc/default/kubelet")
# What kubeadm's drop-in passes before the files' arguments (10-kubeadm.conf: KUBELET_KUBECONFIG_ARGS and
# KUBELET_CONFIG_ARGS).
KUBEADM_FIXED_ARGS: tuple[str, ...] = (
    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
    "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "--config=/var/lib/kubelet/config.yaml",
)

# As upstream's pflag deprecation notice for this flag (cmd/kubelet/app/options).
POD_INFRA_DEPRECATION = (
    "Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will get "
    "sandbox image information from CRI."
)

# Upstream kubeletapis.KubeletLabelNamespaces and KubeletLabels: the only kubernetes.io / k8s.io labels a kubelet
# may set on its own Node (the NodeRestriction admission plugin refuses the others).
LABEL_NAMESPACES: tuple[str, ...] = ("kubelet.kubernetes.io", "node.kubernetes.io")
ALLOWED_LABELS: tuple[str, ...] = (
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)

_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class FlagError(ValueError):
    """The command line cannot be used: the message names the flag, as pflag's errors do."""


@dataclass(frozen=True)
class KubeletFlags:
    """The supported flags after parsing; None where a flag was not given (the config's or nodeagent's default)."""

    config: Path | None = None
    kubeconfig: Path | None = None
    bootstrap_kubeconfig: Path | None = None
    container_runtime_endpoint: str | None = None
    node_ip: str | None = None
    hostname_override: str | None = None
    pod_infra_container_image: str | None = None
    provider_id: str | None = None  # kind passes it (kind://<provider>/<cluster>/<node>)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    register_with_taints: tuple[Taint, ...] | None = None
    root_dir: Path = Path("/var/lib/kubelet")
    cert_dir: Path | None = None
    verbosity: int = 0
    version: str | None = None  # "true" or "raw" when --version was given
    help: bool = False

    @property
    def effective_cert_dir(self) -> Path:
        """As upstream: --cert-dir defaults to <root-dir>/pki."""
        return self.cert_dir if self.cert_dir is not None else self.root_dir / "pki"


# name -> takes a value (False: a boolean-like flag that may stand alone, as pflag's NoOptDefVal).
_FLAGS: dict[str, bool] = {
    "config": True,
    "kubeconfig": True,
    "bootstrap-kubeconfig": True,
    "container-runtime-endpoint": True,
    "node-ip": True,
    "hostname-override": True,
    "pod-infra-container-image": True,
    "provider-id": True,
    "node-labels": True,
    "register-with-taints": True,
    "root-dir": True,
    "cert-dir": True,
    "v": True,
    "version": False,
    "help": False,
}
_SHORTHANDS = {"v": "v", "h": "help"}


def _is_kubernetes_label(key: str) -> bool:
    namespace = key.split("/", 1)[0] if "/" in key else ""
    return any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))


def _is_kubelet_label(key: str) -> bool:
    if key in ALLOWED_LABELS:
        return True
    namespace = key.split("/", 1)[0] if "/" in key else ""
    return any(namespace == d or namespace.endswith("." + d) for d in LABEL_NAMESPACES)


def _qualified_name_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _NAME_PART.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return None


def parse_node_labels(text: str, into: dict[str, str]) -> None:
    """`k=v,k2=v2` into `into` (cliflag.MapStringString: pairs split on ',' and the first '=')."""
    for pair in text.split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            raise FlagError(f'invalid argument "{text}" for "--node-labels" flag: malformed pair, expect string=string')
        into[key.strip()] = value.strip()


def validate_node_labels(labels: Mapping[str, str]) -> None:
    """As upstream's ValidateKubeletFlags: no foreign kubernetes.io/k8s.io label, every key and value well formed."""
    unknown = sorted(k for k in labels if _is_kubernetes_label(k) and not _is_kubelet_label(k))
    if unknown:
        raise FlagError(
            f"unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{' '.join(unknown)}]\n"
            f"--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
            f"({', '.join(LABEL_NAMESPACES)}) or be in the specifically allowed set ({', '.join(ALLOWED_LABELS)})"
        )
    problems = []
    for key, value in sorted(labels.items()):
        if (problem := _qualified_name_problem(key)) is not None:
            problems.append(f"'{key}' - {problem}")
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problems.append(f"'{value}' - a valid label must be an empty string or consist of alphanumeric characters")
    if problems:
        raise FlagError(f"invalid node labels: {'; '.join(problems)}")


def parse_taints(text: str) -> tuple[Taint, ...]:
    """`key=value:Effect` or `key:Effect`, comma-separated (upstream's taints.ParseTaints)."""
    taints: list[Taint] = []
    for spec in text.split(","):
        if not spec:
            continue
        head, sep, effect = spec.rpartition(":")
        if not sep or not head:
            raise FlagError(f'invalid argument "{text}" for "--register-with-taints" flag: invalid taint spec: {spec}')
        try:
            parsed = TaintEffect(effect)
        except ValueError as exc:
            raise FlagError(
                f'invalid argument "{text}" for "--register-with-taints" flag: invalid taint effect: {effect}, '
                "unsupported taint effect"
            ) from exc
        key, _, value = head.partition("=")
        if (problem := _qualified_name_problem(key)) is not None:
            raise FlagError(f'invalid argument "{text}" for "--register-with-taints" flag: {key}: {problem}')
        taints.append(Taint(key=key, effect=parsed, value=value))
    return tuple(taints)


def _split(argv: Sequence[str]) -> list[tuple[str, str | None, str]]:
    """(name, value, as written) per flag, pflag's way; the value None for a flag that stands alone."""
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            if i < len(argv):
                raise FlagError(f'unknown command "{argv[i]}" for "kubelet"')
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            name = name.replace("_", "-")
            if name not in _FLAGS:
                raise FlagError(f"unknown flag: --{name}")
            if eq:
                out.append((name, value, arg))
            elif not _FLAGS[name]:
                out.append((name, None, arg))
            elif i < len(argv):
                out.append((name, argv[i], arg))
                i += 1
            else:
                raise FlagError(f"flag needs an argument: --{name}")
        elif arg.startswith("-") and len(arg) > 1:
            short, rest = arg[1], arg[2:]
            if short not in _SHORTHANDS:
                raise FlagError(f"unknown shorthand flag: '{short}' in {arg}")
            name = _SHORTHANDS[short]
            if not _FLAGS[name]:
                if rest:
                    raise FlagError(f"unknown shorthand flag: '{rest[0]}' in {arg}")
                out.append((name, None, arg))
            elif rest:
                out.append((name, rest.removeprefix("="), arg))
            elif i < len(argv):
                out.append((name, argv[i], arg))
                i += 1
            else:
                raise FlagError(f"flag needs an argument: 'v' in -{short}")
        else:
            raise FlagError(f'unknown command "{arg}" for "kubelet"')
    return out


def parse_kubelet_args(argv: Sequence[str]) -> KubeletFlags:
    """The kubelet's flags; FlagError names the first that is unknown or malformed."""
    try:
        flags = _parse(argv)
    except FlagError as exc:
        raise FlagError(f"failed to parse kubelet flag: {exc}") from exc
    try:
        validate_node_labels(flags.node_labels)
    except FlagError as exc:
        raise FlagError(f"failed to validate kubelet flags: {exc}") from exc
    return flags


def _parse(argv: Sequence[str]) -> KubeletFlags:
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for name, value, written in _split(argv):
        if name == "help":
            values["help"] = True
        elif name == "version":
            choice = "true" if value is None else value.lower()
            if choice in ("false", "0", "f"):
                values.pop("version", None)
                continue
            if choice not in ("true", "1", "t", "raw"):
                raise FlagError(f'invalid argument "{value}" for "{written.partition("=")[0]}" flag: invalid syntax')
            values["version"] = "raw" if choice == "raw" else "true"
        elif name == "v":
            assert value is not None
            try:
                level = int(value)
            except ValueError as exc:
                raise FlagError(f'invalid argument "{value}" for "-v, --v" flag: strconv.ParseInt: parsing '
                                f'"{value}": invalid syntax') from exc  # fmt: skip
            if level < 0:
                raise FlagError(f'invalid argument "{value}" for "-v, --v" flag: must be non-negative')
            values["verbosity"] = level
        elif name == "node-labels":
            assert value is not None
            parse_node_labels(value, labels)
        elif name == "register-with-taints":
            assert value is not None
            values["register_with_taints"] = parse_taints(value)
        elif name in ("config", "kubeconfig", "bootstrap-kubeconfig", "root-dir", "cert-dir"):
            assert value is not None
            values[name.replace("-", "_")] = Path(value) if value else None
        else:
            assert value is not None
            values[name.replace("-", "_")] = value or None
    if values.get("root_dir") is None:
        values.pop("root_dir", None)
    return KubeletFlags(node_labels=labels, **values)


def version_line(kubernetes_version: str, mode: str) -> str:
    """`kubelet --version`: "Kubernetes v1.34.4", as upstream's verflag; `--version=raw` the version.Info struct."""
    if mode == "raw":
        return f'version.Info{{GitVersion:"{kubernetes_version}", Platform:"linux"}}'
    return f"Kubernetes {kubernetes_version}"


def config_overrides(flags: KubeletFlags) -> dict[str, Any]:
    """The KubeletConfiguration fields (snake_case) the flags set: as upstream, a flag wins over the config file."""
    overrides: dict[str, Any] = {}
    if flags.container_runtime_endpoint is not None:
        overrides["container_runtime_endpoint"] = flags.container_runtime_endpoint
    if flags.register_with_taints is not None:
        overrides["register_with_taints"] = flags.register_with_taints
    if flags.provider_id is not None:
        overrides["provider_id"] = flags.provider_id
    return overrides


def read_env_file(text: str) -> dict[str, str]:
    """A systemd EnvironmentFile: `KEY=value` lines, values optionally quoted, `#`/`;` comments."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def drop_in_argv(
    kubeadm_flags_env: str | None,
    kubelet_defaults: str | None = None,
    *,
    fixed: Sequence[str] = KUBEADM_FIXED_ARGS,
) -> list[str]:
    """The argv kubeadm's drop-in gives the kubelet: the fixed flags, then $KUBELET_KUBEADM_ARGS (from
    kubeadm-flags.env) and $KUBELET_EXTRA_ARGS (from /etc/default/kubelet), each split on whitespace as systemd
    splits an unquoted `$VAR` (quotes inside a value do not group words there; shlex keeps them grouped, which only
    matters for values with spaces, which no kubelet flag kubeadm writes has)."""
    argv = list(fixed)
    for text, key in ((kubeadm_flags_env, "KUBELET_KUBEADM_ARGS"), (kubelet_defaults, "KUBELET_EXTRA_ARGS")):
        if text is None:
            continue
        value = read_env_file(text).get(key, "")
        argv.extend(shlex.split(value))
    return argv


def read_drop_in(kubeadm_flags_env: Path = KUBEADM_FLAGS_ENV, kubelet_defaults: Path = KUBELET_DEFAULTS) -> list[str]:
    """`drop_in_argv` from the files; a missing file is empty, as the drop-in's `EnvironmentFile=-...`."""

    def read(path: Path) -> str | None:
        try:
            return path.read_text()
        except FileNotFoundError:
            return None

    return drop_in_argv(read(kubeadm_flags_env), read(kubelet_defaults))


def usage() -> str:
    names = ", ".join(f"--{name}" for name in _FLAGS if name != "help")
    return (
        "Usage: kubelet [flags]\n"
        "nodeagent as the kubelet: the upstream kubelet's command line, as kubeadm and distributions pass it.\n"
        f"Supported flags: {names} (-v is --v).\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The `kubelet` console script: parse as the kubelet, then run nodeagent with what the flags say."""
    # Imported here: parsing and --version must not pay for the whole agent.
    import asyncio  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from nodeagent.agent import AgentError, AgentOptions, run_agent  # noqa: PLC0415
    from nodeagent.cli import _error_text, _setup_logging  # noqa: PLC0415
    from nodeagent.config import ConfigError  # noqa: PLC0415
    from nodeagent.version import DEFAULT_KUBERNETES_VERSION  # noqa: PLC0415

    try:
        flags = parse_kubelet_args(sys.argv[1:] if argv is None else argv)
    except FlagError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if flags.help:
        print(usage())
        return 0
    if flags.version is not None:
        print(version_line(DEFAULT_KUBERNETES_VERSION, flags.version))
        return 0
    if flags.config is None:
        print("Error: --config is required: nodeagent reads its settings from a KubeletConfiguration", file=sys.stderr)
        return 1
    # klog's -v: 4 and above is the kubelet's debug level.
    _setup_logging(flags.verbosity >= 4)
    if flags.pod_infra_container_image is not None:
        print(POD_INFRA_DEPRECATION, file=sys.stderr)
    options = AgentOptions(
        config_path=flags.config,
        kubeconfig=flags.kubeconfig,
        bootstrap_kubeconfig=flags.bootstrap_kubeconfig,
        cert_dir=flags.effective_cert_dir,
        node_name=flags.hostname_override,
        node_ip=flags.node_ip,
        root_dir=flags.root_dir,
        node_labels=dict(flags.node_labels),
        config_overrides=config_overrides(flags),
    )
    try:
        asyncio.run(run_agent(options))
    except (AgentError, ConfigError) as exc:
        print(_error_text(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
