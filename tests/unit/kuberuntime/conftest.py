"""Fixtures of the runtime manager's unit tests: the cri tests' scripted CRI runtime on a real socket, with the
project's CRI client connected to it (one definition, shared)."""

from tests.unit.cri.conftest import client, runtime, socket_dir

__all__ = ["client", "runtime", "socket_dir"]
