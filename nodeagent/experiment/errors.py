"""The experiment tool's errors: one hierarchy, mapped to `nodeagent: <message>` by the CLI."""

from __future__ import annotations

from collections.abc import Sequence


class ExperimentError(RuntimeError):
    """The experiment cannot be run: a bad scenario, a missing dependency, a cluster that does not answer."""


class ScenarioError(ExperimentError):
    """A scenario that cannot be used; `problems` lists each as `<field>: <problem>`."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            text = f"{source}: {self.problems[0]}"
        else:
            text = f"{source}: {len(self.problems)} problems:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(text)


class MissingDependency(ExperimentError):
    """matplotlib (the `experiment` extra) is not installed."""
