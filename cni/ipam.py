"""nodeagent-ipam: addresses from the configured ranges, kept on disk under a lock, one file per address.

State lives in `dataDir/<network name>/`, laid out as host-local lays it out, so that an operator's habits (and a
node switched from the reference plugins) carry over:
- `<address>`: one file per allocated address, holding the container ID and the interface name;
- `last_reserved_ip.<range set>`: where the previous allocation ended, so that allocation goes round-robin and a
  pod restarting in a loop does not get the address its previous incarnation just gave back;
- `lock`: flock(2) taken around every read-modify-write, so concurrent ADDs (processes or helper threads) never
  hand out one address twice. The address file is also created with O_EXCL, so even a broken lock cannot.

The allocation order is a pure function (`candidates`), driven by table tests; `Store` is the disk and the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cni.config import IPAMConfig, Range, RangeSet
from cni.errors import CNIError, Code

IPv4 = ipaddress.IPv4Address
LOCK_TIMEOUT = 30.0
_LAST_RESERVED = "last_reserved_ip."


@dataclass(frozen=True)
class Owner:
    """The spec's key of an attachment within a network: (container ID, interface name)."""

    container_id: str
    ifname: str


@dataclass(frozen=True)
class Allocation:
    ip: IPv4
    range: Range
    range_set: int
    reused: bool = False  # the owner held it before this call (an earlier ADD of the same attachment)


def candidates(range_set: RangeSet, last: IPv4 | None) -> Iterator[tuple[IPv4, Range]]:
    """Every allocatable address of the set once, starting after `last` (round-robin) and wrapping around.

    Gateways are never candidates. A `last` outside the set (ranges changed) starts from the beginning, as
    host-local does. Lazy: a /16 is not listed to hand out its first free address.
    """
    first_span, first_value = 0, int(range_set[0].start)
    if last is not None:
        for i, r in enumerate(range_set):
            if last in r:
                if last < r.end:
                    first_span, first_value = i, int(last) + 1
                else:
                    first_span = (i + 1) % len(range_set)
                    first_value = int(range_set[first_span].start)
                break
    order = [(range_set[first_span], first_value, int(range_set[first_span].end))]
    for step in range(1, len(range_set)):
        r = range_set[(first_span + step) % len(range_set)]
        order.append((r, int(r.start), int(r.end)))
    head = range_set[first_span]
    if first_value > int(head.start):
        order.append((head, int(head.start), first_value - 1))
    for r, low, high in order:
        gateway = int(r.gateway)
        for value in range(low, high + 1):
            if value != gateway:
                yield IPv4(value), r


def describe(range_set: RangeSet) -> str:
    return ", ".join(str(r) for r in range_set)


class Store:
    """The allocations of one network on disk. Methods other than `lock` expect the lock to be held."""

    def __init__(self, data_dir: Path, network: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.dir = data_dir / network
        self._monotonic = monotonic

    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        if timeout is None:
            timeout = LOCK_TIMEOUT
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o755)
            fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise CNIError(
                Code.IO_FAILURE,
                f"cannot open the IPAM lock in {self.dir}: {exc.strerror} (check ipam.dataDir)",
                details=io_details("opening the IPAM lock", exc),
            ) from exc
        try:
            deadline = self._monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self._monotonic() >= deadline:
                        raise CNIError(
                            Code.TRY_AGAIN_LATER,
                            f"the IPAM lock {self.dir / 'lock'} has been held by another process for {timeout:.0f}s",
                            details=f"operation: taking the IPAM lock; errno: EWOULDBLOCK; timeout: {timeout:g}s",
                        ) from None
                    time.sleep(0.002)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def allocations(self) -> dict[IPv4, Owner]:
        found: dict[IPv4, Owner] = {}
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return found
        for name in names:
            try:
                ip = ipaddress.ip_address(name)
            except ValueError:
                continue
            if not isinstance(ip, IPv4):
                continue
            owner = self._read_owner(self.dir / name)
            if owner is not None:
                found[ip] = owner
        return found

    @staticmethod
    def _read_owner(path: Path) -> Owner | None:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return None
        container_id = lines[0].strip() if lines else ""
        ifname = lines[1].strip() if len(lines) > 1 else ""
        return Owner(container_id, ifname)

    def reserve(self, ip: IPv4, owner: Owner) -> bool:
        """Write the address file if nobody holds the address; False if it is taken."""
        try:
            fd = os.open(self.dir / str(ip), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{owner.container_id}\n{owner.ifname}\n")
        return True

    def release(self, ip: IPv4) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / str(ip)).unlink()

    def last_reserved(self, range_set: int) -> IPv4 | None:
        try:
            ip = ipaddress.ip_address((self.dir / f"{_LAST_RESERVED}{range_set}").read_text().strip())
        except (OSError, ValueError):
            return None
        return ip if isinstance(ip, IPv4) else None

    def set_last_reserved(self, range_set: int, ip: IPv4) -> None:
        path = self.dir / f"{_LAST_RESERVED}{range_set}"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(f"{ip}\n")
        tmp.replace(path)


def allocate(store: Store, config: IPAMConfig, owner: Owner) -> list[Allocation]:
    """One address per range set for `owner`.

    An owner that already holds addresses gets them back, marked `reused`: a runtime must not ADD twice without a
    DEL, so a repeat means the earlier ADD died half way (e.g. a helper that crashed). The plugin then finishes
    that ADD's work, or refuses if its interface is already there; either way it never frees a reused address on
    its own error. Raises CNIError(100) naming the range set when it is full, CNIError(5) when the disk fails.
    """
    with store.lock(), _disk_errors(store, "allocating an address"):
        held = store.allocations()
        mine = {ip for ip, who in held.items() if who == owner}
        result: list[Allocation] = []
        for index, range_set in enumerate(config.ranges):
            existing = next(((ip, r) for ip in sorted(mine) for r in range_set if ip in r), None)
            if existing is not None:
                result.append(Allocation(existing[0], existing[1], index, reused=True))
                continue
            chosen: Allocation | None = None
            for ip, r in candidates(range_set, store.last_reserved(index)):
                if ip in held or config.is_reserved(ip):
                    continue
                if store.reserve(ip, owner):
                    chosen = Allocation(ip, r, index)
                    break
            if chosen is None:
                for done in result:  # give back what this call took from earlier range sets
                    if done.ip not in mine:
                        store.release(done.ip)
                in_use = sum(1 for ip in held if any(ip in r for r in range_set))
                raise CNIError(
                    Code.ADDRESSES_EXHAUSTED,
                    f"no free address in range set {describe(range_set)}: {in_use} held by pods, the rest are "
                    "gateways or ipam.reserved; delete pods or widen ipam.ranges",
                )
            store.set_last_reserved(index, chosen.ip)
            result.append(chosen)
        return result


def release(store: Store, owner: Owner, only: Sequence[IPv4] | None = None) -> list[IPv4]:
    """Free every address `owner` holds (or those of `only` it still holds); none held is success (DEL)."""
    with store.lock(), _disk_errors(store, "releasing an address"):
        freed = [ip for ip, who in store.allocations().items() if who == owner and (only is None or ip in only)]
        for ip in freed:
            store.release(ip)
        return freed


def held_by(store: Store, owner: Owner) -> list[IPv4]:
    with store.lock():
        return sorted(ip for ip, who in store.allocations().items() if who == owner)


def stale_owners(store: Store, valid: Sequence[Owner]) -> list[Owner]:
    """GC (spec 1.1): the owners of allocations that are not valid attachments, nothing released yet."""
    keep = set(valid)
    with store.lock():
        return sorted({who for who in store.allocations().values() if who not in keep}, key=_owner_key)


def _owner_key(owner: Owner) -> tuple[str, str]:
    return owner.container_id, owner.ifname


def garbage_collect(store: Store, valid: Sequence[Owner]) -> list[tuple[IPv4, Owner]]:
    """GC (spec 1.1): free every allocation whose owner is not a valid attachment."""
    keep = set(valid)
    with store.lock():
        stale = [(ip, who) for ip, who in store.allocations().items() if who not in keep]
        for ip, _ in stale:
            store.release(ip)
        return stale


def free_count(store: Store, config: IPAMConfig) -> list[int]:
    """Free addresses per range set (STATUS)."""
    with store.lock():
        held = store.allocations()
    return [
        sum(1 for ip, _ in candidates(rs, None) if ip not in held and not config.is_reserved(ip))
        for rs in config.ranges
    ]


def ensure_writable(store: Store) -> None:
    """STATUS: the data directory can take the lock; CNIError(5) says why not."""
    with store.lock():
        probe = store.dir / f".probe{os.getpid()}"
        try:
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            code = Code.IO_FAILURE if exc.errno != errno.ENOSPC else Code.TRY_AGAIN_LATER
            raise CNIError(
                code, f"cannot write to {store.dir}: {exc.strerror}", details=io_details("writing a probe file", exc)
            ) from exc


@contextlib.contextmanager
def _disk_errors(store: Store, operation: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        code = Code.TRY_AGAIN_LATER if exc.errno == errno.ENOSPC else Code.IO_FAILURE
        raise CNIError(
            code, f"IPAM state in {store.dir}: {operation} failed: {exc.strerror}", details=io_details(operation, exc)
        ) from exc


def io_details(operation: str, exc: OSError) -> str:
    """The `details` of a CNI error from a failed system call: what was done, the errno by name, the path."""
    parts = [f"operation: {operation}"]
    if exc.errno is not None:
        parts.append(f"errno: {errno.errorcode.get(exc.errno, '?')} ({exc.errno})")
    if exc.filename is not None:
        parts.append(f"path: {exc.filename}")
    return "; ".join(parts)
