"""The harness's own errors, one tree, so the CLI maps them to a one-line message and exit code 1."""

from __future__ import annotations


class ConformanceError(RuntimeError):
    """`nodeagent conformance` cannot go on; the message says which step and why."""


class BuildError(ConformanceError):
    """e2e.test or the ginkgo CLI did not build; the message carries the tail of the Go toolchain's output."""


class ReportError(ConformanceError):
    """The suite's JUnit report is missing or cannot be read."""
