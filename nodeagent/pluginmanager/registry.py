"""The CSI drivers registered on this node (upstream's csiDrivers DriversStore): name -> endpoint and version.

The plugin manager writes it as drivers register and deregister; the kubernetes.io/csi volume plugin reads it
(`endpoint`, the `nodeagent.volume.csi.DriverRegistry` protocol) to dial a driver, and a volume of a driver not in
it fails with upstream's "driver name X not found in the list of registered CSI drivers".
"""

from __future__ import annotations

from dataclasses import dataclass

from csi.registration.versions import Version


@dataclass(frozen=True)
class RegisteredDriver:
    name: str
    endpoint: str
    highest_supported_version: Version


class CSIDriverRegistry:
    def __init__(self) -> None:
        self._drivers: dict[str, RegisteredDriver] = {}

    def endpoint(self, driver: str) -> str | None:
        """The socket the driver serves CSI on, None when it is not registered."""
        registered = self._drivers.get(driver)
        return None if registered is None else registered.endpoint

    def get(self, driver: str) -> RegisteredDriver | None:
        return self._drivers.get(driver)

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def set(self, driver: RegisteredDriver) -> None:
        self._drivers[driver.name] = driver

    def delete(self, driver: str) -> None:
        self._drivers.pop(driver, None)
