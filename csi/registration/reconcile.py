"""The plugin manager's decisions as pure functions: desired and actual state, what to do next, and the backoff.

As upstream's pluginmanager (cache/, reconciler/, goroutinemap/exponentialbackoff):

- the desired state is the plugin sockets found under the registry directory, each with a generation that changes
  whenever the socket is created again (upstream gives every Create event a new UUID), so a driver that restarts
  and recreates its socket is registered anew;
- the actual state is what was registered, with the generation it was registered at;
- each reconcile first deregisters what is registered but no longer desired, or desired at a newer generation, and
  then registers what is desired but not registered at that generation;
- one operation at a time per socket path; a failed one is not retried before its backoff passes (500 ms, doubling
  up to 2 m 2 s), and a success forgets the backoff.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 122.0

# (st_dev, st_ino) of a socket file: a new inode means the socket was created again.
Identity = tuple[int, int]


@dataclass(frozen=True)
class DesiredPlugin:
    socket_path: str
    generation: int


@dataclass(frozen=True)
class RegisteredPlugin:
    socket_path: str
    generation: int
    plugin_type: str
    name: str
    endpoint: str


@dataclass(frozen=True)
class Register:
    plugin: DesiredPlugin


@dataclass(frozen=True)
class Deregister:
    plugin: RegisteredPlugin


Action = Register | Deregister


@dataclass(frozen=True)
class Backoff:
    """The exponential backoff of one socket path's failed operations (upstream's ExponentialBackoff)."""

    last_error_at: float
    duration: float

    def allows(self, now: float) -> bool:
        return now - self.last_error_at > self.duration

    def after_failure(self, now: float) -> Backoff:
        return Backoff(now, min(self.duration * 2, MAX_BACKOFF))


def first_failure(now: float) -> Backoff:
    return Backoff(now, INITIAL_BACKOFF)


def failed(backoff: Backoff | None, now: float) -> Backoff:
    return first_failure(now) if backoff is None else backoff.after_failure(now)


@dataclass(frozen=True)
class Scan:
    """One look at the registry directory: every socket found (path -> identity)."""

    sockets: Mapping[str, Identity]


def update_desired(
    desired: Mapping[str, DesiredPlugin],
    identities: Mapping[str, Identity],
    scan: Scan,
    created: Collection[str],
    next_generation: int,
) -> tuple[dict[str, DesiredPlugin], dict[str, Identity], int]:
    """The desired state after a scan: sockets gone are dropped; new ones, recreated ones (a create event, or a new
    inode when the remove and create were coalesced) get a new generation. Returns (desired, identities, next gen)."""
    new_desired: dict[str, DesiredPlugin] = {}
    new_identities: dict[str, Identity] = {}
    for path in sorted(scan.sockets):
        identity = scan.sockets[path]
        current = desired.get(path)
        if current is None or path in created or identities.get(path) != identity:
            new_desired[path] = DesiredPlugin(path, next_generation)
            next_generation += 1
        else:
            new_desired[path] = current
        new_identities[path] = identity
    return new_desired, new_identities, next_generation


def plan(
    desired: Mapping[str, DesiredPlugin],
    actual: Mapping[str, RegisteredPlugin],
    busy: Collection[str],
    backoffs: Mapping[str, Backoff],
    now: float,
) -> list[Action]:
    """What one reconcile starts, deregistrations first, as upstream's reconciler. A socket path with an operation
    running, or a failed one whose backoff has not passed, is left for a later reconcile."""

    def may_start(path: str) -> bool:
        if path in busy:
            return False
        backoff = backoffs.get(path)
        return backoff is None or backoff.allows(now)

    actions: list[Action] = []
    for path in sorted(actual):
        registered = actual[path]
        wanted = desired.get(path)
        if (wanted is None or wanted.generation != registered.generation) and may_start(path):
            actions.append(Deregister(registered))
    for path in sorted(desired):
        if path in actual:
            # Registered at this generation: nothing to do; at an older one: its deregistration runs first.
            continue
        if may_start(path):
            actions.append(Register(desired[path]))
    return actions
