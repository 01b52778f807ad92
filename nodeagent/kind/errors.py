"""The one error type of nodeagent/kind: the message says which step failed and why."""

from __future__ import annotations


class KindError(RuntimeError):
    """A kind step failed (install, the isolated daemon, the node check)."""
