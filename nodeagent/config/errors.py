"""The config boundary's exceptions.

One error class for everything a user can get wrong in a config file. It carries every problem found, not only the
first, because the upstream kubelet also reports all validation errors of a file at once and a user fixing a config
should not have to run the agent once per mistake.
"""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(Exception):
    """The configuration cannot be used. `problems` lists each one as `<field path>: <what is wrong>`."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.summary = message
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


class DurationError(ValueError):
    """A string is not a Go duration (`time.ParseDuration` syntax)."""


class QuantityError(ValueError):
    """A string is not a Kubernetes resource quantity (`resource.ParseQuantity` syntax) or percentage."""
