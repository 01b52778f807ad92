"""The highest supported version of a registering plugin: upstream's HighestSupportedVersion, its results and texts."""

from __future__ import annotations

import pytest

from csi.registration.versions import VersionError, highest_supported_version, parse_generic


@pytest.mark.parametrize(
    ("versions", "highest"),
    [
        (["1.0.0"], "1.0.0"),
        (["v1.0.0"], "1.0.0"),
        (["0.3.0", "1.0.0"], "1.0.0"),
        (["1.0.0", "1.2.0", "1.1.0"], "1.2.0"),
        (["1.13.0", "2.0.0"], "1.13.0"),  # a 2.x version is skipped, not an error
        (["1.0"], "1.0"),
        (["1.0.0-rc1"], "1.0.0"),  # generic versions ignore what follows the numbers
        (["garbage", "1.5.0"], "1.5.0"),
    ],
)
def test_highest(versions: list[str], highest: str) -> None:
    assert str(highest_supported_version(versions)) == highest


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ([], "empty array for supported versions"),
        (["0.3.0"], "highest supported version reported is 0.3.0, must be v1.x"),
        (
            ["2.0.0"],
            "could not find a highest supported version from versions ([2.0.0]) reported: <nil>",
        ),
        (
            ["x", "1"],
            'could not find a highest supported version from versions ([x 1]) reported: could not parse "x" as version',
        ),
        (
            ["01.0"],
            "could not find a highest supported version from versions ([01.0]) reported: "
            'illegal zero-prefixed version component "01" in "01.0"',
        ),
    ],
)
def test_refused_with_upstreams_text(versions: list[str], message: str) -> None:
    with pytest.raises(VersionError) as raised:
        highest_supported_version(versions)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("a", "b", "less"),
    [("1.0", "1.0.0", False), ("1.0.0", "1.0", False), ("1.2", "1.10", True), ("1.10.0", "1.9.9", False)],
)
def test_comparison_pads_missing_components(a: str, b: str, less: bool) -> None:
    assert parse_generic(a).less_than(parse_generic(b)) is less
