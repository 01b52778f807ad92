"""The fuzz targets, by name, in the order the runner runs them."""

from __future__ import annotations

import importlib

from tests.fuzz.engine import Target

MODULES = ("manifests", "apipods", "kubeletconfig", "quantities", "cni", "kubeletapi", "eviction", "csi")


def load(name: str) -> Target:
    target: Target = importlib.import_module(f"tests.fuzz.{name}").TARGET
    return target


def all_targets() -> list[Target]:
    return [load(name) for name in MODULES]
