"""Scenario files: manifests plus the actions to play, and the differences a scenario keeps on purpose.

A scenario is pure data, loaded and checked here so that a typo fails before any testbed comes up. Image names are
written as `{{busybox}}`, `{{agnhost}}` and so on, and filled in from the testbed's registry when it is played.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

SCENARIO_DIR = Path(__file__).parent / "scenarios"
GLOBAL_KNOWN = Path(__file__).parent / "known_differences.yaml"

OBJECT_KINDS = ("ConfigMap", "Secret", "Service", "RuntimeClass", "DeviceClass", "ResourceClaimTemplate")
# What a scenario may run beside each agent (tests/differential/devices.py).
DEVICE_KINDS = ("device-plugin", "dra-driver")
ACTIONS = ("create", "wait", "sleep", "kill", "exec", "delete")
WAIT_KEYS = {
    "pod", "timeout", "phase", "condition", "status", "container", "state", "reason", "restartCount", "ready",
    "started", "exitCode", "gone", "deleting",
}  # fmt: skip


class ScenarioError(ValueError):
    """A scenario file that cannot be played as written."""


@dataclass(frozen=True)
class KnownDifference:
    """A difference kept on purpose: state paths (`path`) or event lines (`event`), fnmatch globs, and why."""

    reason: str
    path: str = ""
    event: str = ""


@dataclass(frozen=True)
class Action:
    kind: str
    args: Obj


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    pods: tuple[Obj, ...]
    objects: tuple[Obj, ...]
    actions: tuple[Action, ...]
    known: tuple[KnownDifference, ...] = ()
    timeout: float = 30.0
    tags: tuple[str, ...] = field(default=())
    devices: tuple[str, ...] = field(default=())

    def pod(self, name: str) -> Obj:
        for pod in self.pods:
            if pod["metadata"]["name"] == name:
                return copy.deepcopy(pod)
        raise ScenarioError(f"{self.name}: no pod named {name!r}")


def substitute(value: Any, images: dict[str, str]) -> Any:
    """`value` with every `{{key}}` in its strings replaced by images[key]."""
    if isinstance(value, str):
        for key, image in images.items():
            value = value.replace("{{" + key + "}}", image)
        return value
    if isinstance(value, list):
        return [substitute(v, images) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, images) for k, v in value.items()}
    return value


def _known(raw: Any, where: str) -> tuple[KnownDifference, ...]:
    out = []
    for entry in raw or ():
        if not isinstance(entry, dict) or not entry.get("reason") or not (entry.get("path") or entry.get("event")):
            raise ScenarioError(f"{where}: a known difference needs `reason` and `path` or `event`: {entry!r}")
        out.append(
            KnownDifference(reason=str(entry["reason"]), path=entry.get("path", ""), event=entry.get("event", ""))
        )
    return tuple(out)


def _action(raw: Any, pods: set[str], where: str) -> Action:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ScenarioError(f"{where}: an action is a mapping of one key, one of {ACTIONS}: {raw!r}")
    ((kind, args),) = raw.items()
    if kind not in ACTIONS:
        raise ScenarioError(f"{where}: unknown action {kind!r} (one of {ACTIONS})")
    if kind == "create":
        names = [args] if isinstance(args, str) else list(args)
        for name in names:
            if name != "*" and name not in pods:
                raise ScenarioError(f"{where}: create of unknown pod {name!r}")
        return Action(kind, {"pods": names})
    if kind == "sleep":
        return Action(kind, {"seconds": float(args)})
    if not isinstance(args, dict) or args.get("pod") not in pods:
        raise ScenarioError(f"{where}: {kind} needs `pod:` naming one of {sorted(pods)}: {args!r}")
    if kind == "wait":
        unknown = set(args) - WAIT_KEYS
        if unknown:
            raise ScenarioError(f"{where}: unknown wait keys {sorted(unknown)}")
        if set(args) <= {"pod", "timeout"}:
            raise ScenarioError(f"{where}: a wait needs something to wait for")
    if kind in ("kill", "exec") and not args.get("container"):
        raise ScenarioError(f"{where}: {kind} needs `container:`")
    if kind == "exec" and not isinstance(args.get("command"), list):
        raise ScenarioError(f"{where}: exec needs `command:` as a list")
    return Action(kind, dict(args))


def parse(raw: Obj, name: str) -> Scenario:
    where = f"scenario {name}"
    pods = tuple(raw.get("pods") or ())
    if not pods:
        raise ScenarioError(f"{where}: no pods")
    names = set()
    for pod in pods:
        pod_name = (pod.get("metadata") or {}).get("name")
        if not pod_name or not isinstance(pod.get("spec"), dict):
            raise ScenarioError(f"{where}: a pod needs metadata.name and spec")
        names.add(pod_name)
    actions = tuple(_action(a, names, f"{where} action {i + 1}") for i, a in enumerate(raw.get("actions") or ()))
    if not actions:
        raise ScenarioError(f"{where}: no actions")
    for obj in raw.get("objects") or ():
        if obj.get("kind") not in OBJECT_KINDS:
            raise ScenarioError(f"{where}: objects may be {', '.join(OBJECT_KINDS)}, not {obj.get('kind')!r}")
    devices = tuple(raw.get("devices") or ())
    unknown_devices = set(devices) - set(DEVICE_KINDS)
    if unknown_devices:
        raise ScenarioError(f"{where}: devices may be {', '.join(DEVICE_KINDS)}, not {sorted(unknown_devices)}")
    return Scenario(
        name=name,
        description=str(raw.get("description", "")).strip(),
        pods=pods,
        objects=tuple(raw.get("objects") or ()),
        actions=actions,
        known=_known(raw.get("known_differences"), where),
        timeout=float(raw.get("timeout", 30)),
        tags=tuple(raw.get("tags") or ()),
        devices=devices,
    )


def load(path: Path) -> Scenario:
    return parse(yaml.safe_load(path.read_text()), path.stem)


def load_all(directory: Path = SCENARIO_DIR, only: tuple[str, ...] = ()) -> list[Scenario]:
    found = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    missing = [n for n in only if n not in found]
    if missing:
        raise ScenarioError(f"no such scenarios: {', '.join(missing)} (have {', '.join(found)})")
    return [load(found[n]) for n in (only or tuple(found))]


def load_global_known(path: Path = GLOBAL_KNOWN) -> tuple[KnownDifference, ...]:
    if not path.exists():
        return ()
    return _known(yaml.safe_load(path.read_text()), str(path.name))
