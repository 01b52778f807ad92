"""Go's net/url refusals of gRPC targets (nodeagent/grpctarget.py), against the texts of the upstream kubelet v1.34.4
and Go's url.Parse."""

from __future__ import annotations

import pytest

from nodeagent.grpctarget import dial_context_error, new_client_error, url_parse_error


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("passthrough:////d/x.sock", None),
        ("passthrough:////d/x%41.sock", None),
        ("passthrough:////d/x.sock?%zz", None),  # the query is not unescaped by Parse
        ("passthrough:////d/x.sock#", None),
        ("dns:///unix:/d/x.sock", None),
        ("unix:../x%zz", None),  # opaque: taken as it is
        ("passthrough:////d/x\x00", 'parse "passthrough:////d/x\\x00": net/url: invalid control character in URL'),
        ("passthrough:////d/x\x7f", 'parse "passthrough:////d/x\\x7f": net/url: invalid control character in URL'),
        ("passthrough:////d/\tx", 'parse "passthrough:////d/\\tx": net/url: invalid control character in URL'),
        ("passthrough:////d/x%zz", 'parse "passthrough:////d/x%zz": invalid URL escape "%zz"'),
        ("passthrough:////d/x%4", 'parse "passthrough:////d/x%4": invalid URL escape "%4"'),
        ("passthrough:////d/x%", 'parse "passthrough:////d/x%": invalid URL escape "%"'),
        ("passthrough:////d/x%\u00e9", 'parse "passthrough:////d/x%\u00e9": invalid URL escape "%\u00e9"'),
        ("passthrough:////d/x%\u20ac", 'parse "passthrough:////d/x%\u20ac": invalid URL escape "%\\xe2\\x82"'),
        # A bad fragment is reported with the fragment; a control character after "#" is not checked.
        ("passthrough:////d/x#%zz", 'parse "passthrough:////d/x#%zz": invalid URL escape "%zz"'),
        ("passthrough:////d/x#\x00", None),
    ],
)
def test_url_parse_errors_as_go_prints_them(url: str, error: str | None) -> None:
    assert url_parse_error(url) == error


def test_the_device_managers_and_the_dra_managers_targets() -> None:
    # The texts the upstream kubelet v1.34.4 sent to a plugin on the testbed (docs/devices.md).
    assert dial_context_error("/var/lib/kubelet/device-plugins/h1-x.sock\x00junk") == (
        'parse "passthrough:////var/lib/kubelet/device-plugins/h1-x.sock\\x00junk": '
        "net/url: invalid control character in URL"
    )
    assert new_client_error("unix:/r/plugins_registry/.h1-x\x00junk") == (
        'parse "dns:///unix:/r/plugins_registry/.h1-x\\x00junk": net/url: invalid control character in URL'
    )
    assert dial_context_error("/var/lib/kubelet/x.sock") is None
    assert new_client_error("unix:../x.sock") is None
    assert new_client_error("unix:/tmp/x.sock") is None
