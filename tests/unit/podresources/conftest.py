"""The device manager's fixtures (a short root dir, the manager and fake plugin harness), shared here."""

from tests.unit.devicemanager.conftest import harness, root

__all__ = ["harness", "root"]
