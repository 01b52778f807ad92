"""The highest supported CSI version of a registering plugin, by upstream's rule (apimachinery's version package).

A plugin lists the CSI spec versions it speaks. As upstream (`HighestSupportedVersion`): each is parsed as a
"generic" version (an optional leading "v", at least two dot-separated numbers, the first without a leading zero,
anything after the numbers ignored); unparsable entries and majors above 1 are skipped; the highest of the rest must
be 1.x. The error texts are upstream's, since a plugin sees them in its registration status.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# As upstream's versionMatchRE: the numeric part, then anything ("extra", not validated for generic versions).
_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)$", re.DOTALL)


class VersionError(ValueError):
    """No usable version; the message is upstream's."""


@dataclass(frozen=True, order=False)
class Version:
    components: tuple[int, ...]

    @property
    def major(self) -> int:
        return self.components[0]

    def less_than(self, other: Version) -> bool:
        # As upstream's compareInternal: missing components count as 0 ("1.0" == "1.0.0").
        width = max(len(self.components), len(other.components))
        mine = self.components + (0,) * (width - len(self.components))
        theirs = other.components + (0,) * (width - len(other.components))
        return mine < theirs

    def __str__(self) -> str:
        return ".".join(str(component) for component in self.components)


def parse_generic(text: str) -> Version:
    match = _VERSION.match(text)
    if match is None:
        raise VersionError(f'could not parse "{text}" as version')
    components = match.group(1).split(".")
    if len(components) < 2:
        raise VersionError(f'illegal version string "{text}"')
    if components[0].startswith("0") and components[0] != "0":
        raise VersionError(f'illegal zero-prefixed version component "{components[0]}" in "{text}"')
    return Version(tuple(int(component) for component in components))


def _go_list(values: Sequence[str]) -> str:
    # Go's %v of a []string: [a b c]
    return "[" + " ".join(values) + "]"


def highest_supported_version(versions: Sequence[str]) -> Version:
    """The highest 1.x version of `versions`, as upstream; raises VersionError with upstream's messages."""
    if not versions:
        raise VersionError("empty array for supported versions")
    highest: Version | None = None
    last_error: VersionError | None = None
    # Upstream walks the list from the end; only the last parse error it met (the first in list order) is reported.
    for text in reversed(versions):
        try:
            version = parse_generic(text)
        except VersionError as exc:
            last_error = exc
            continue
        if version.major > 1:
            continue
        if highest is None or highest.less_than(version):
            highest = version
    if highest is None:
        cause = "<nil>" if last_error is None else str(last_error)
        raise VersionError(
            f"could not find a highest supported version from versions ({_go_list(versions)}) reported: {cause}"
        )
    if highest.major != 1:
        raise VersionError(f"highest supported version reported is {highest}, must be v1.x")
    return highest
