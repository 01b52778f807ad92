"""The go.mod reading behind the e2e build: replace lines carried over, the ginkgo version looked up."""

from __future__ import annotations

import pytest

from nodeagent.conformance.build import e2e_gomod, replace_lines, required_version, version_ldflags

CONTROL_PLANE_GOMOD = """module nodeagent.local/kubernetes-build

go 1.24.0

require k8s.io/kubernetes v1.34.4

require (
\tgithub.com/onsi/ginkgo/v2 v2.21.0 // indirect
\tgithub.com/onsi/gomega v1.35.1 // indirect
)

replace (
\tk8s.io/api => k8s.io/api v0.34.4
\tk8s.io/client-go   =>   k8s.io/client-go v0.34.4 // spaces vary
)

replace example.com/single v1.0.0 => example.com/fork v1.0.1
"""


@pytest.mark.parametrize(
    ("gomod", "expected"),
    [
        (
            CONTROL_PLANE_GOMOD,
            [
                "k8s.io/api => k8s.io/api v0.34.4",
                "k8s.io/client-go => k8s.io/client-go v0.34.4",
                "example.com/single v1.0.0 => example.com/fork v1.0.1",
            ],
        ),
        ("module x\n\nrequire k8s.io/kubernetes v1.34.4\n", []),
        ("replace (\n)\n", []),
        ("// replace a => b\nreplace (\n\t// k8s.io/x => k8s.io/x v0.1.0\n)\n", []),
    ],
)
def test_replace_lines(gomod: str, expected: list[str]) -> None:
    assert replace_lines(gomod) == expected


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("github.com/onsi/ginkgo/v2", "v2.21.0"),
        ("github.com/onsi/gomega", "v1.35.1"),
        ("k8s.io/kubernetes", "v1.34.4"),
        ("github.com/onsi/ginkgo", None),  # a prefix of another module is not that module
        ("k8s.io/api", None),  # named only in replace
    ],
)
def test_required_version(module: str, expected: str | None) -> None:
    assert required_version(CONTROL_PLANE_GOMOD, module) == expected


def test_e2e_gomod_carries_the_replace_lines_and_the_release() -> None:
    text = e2e_gomod(["k8s.io/api => k8s.io/api v0.34.4"])
    assert "require k8s.io/kubernetes v1.34.4\n" in text
    assert replace_lines(text) == ["k8s.io/api => k8s.io/api v0.34.4"]
    assert text.startswith("module nodeagent.local/kubernetes-e2e-build\n")


def test_version_ldflags_stamp_the_release() -> None:
    flags = version_ldflags()
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in flags
    assert "-X k8s.io/component-base/version.gitMinor=34" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMajor=1" in flags
