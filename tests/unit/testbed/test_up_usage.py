"""What `nodeagent up` and `testbed up` print: the first steps on the cluster DNS, or why there is none."""

from __future__ import annotations

from pathlib import Path

from nodeagent import cli
from nodeagent.testbed.layout import Layout


def test_with_cluster_dns_the_first_steps_fetch_a_service_by_name(tmp_path: Path) -> None:
    text = cli._usage(Layout(tmp_path), cluster_dns="198.19.0.10")
    assert "kube-dns Service at 198.19.0.10" in text
    for step in cli.FIRST_STEPS:
        assert f"  {step}\n" in text
    # The busybox `env` offers (vanilla 1.37.0), and a name, not an address.
    assert '--image="$BUSYBOX_IMAGE" -- wget -qO- http://web' in cli.FIRST_STEPS[1]


def test_without_the_hosts_kube_proxy_it_says_whose_it_is_and_offers_no_dns_steps(tmp_path: Path) -> None:
    text = cli._usage(Layout(tmp_path), cluster_dns="198.19.0.10", kube_proxy_held_by="/tmp/other")
    assert "kube-proxy belongs to /tmp/other" in text
    assert not any(step in text for step in cli.FIRST_STEPS)


def test_without_cluster_dns_no_dns_lines(tmp_path: Path) -> None:
    text = cli._usage(Layout(tmp_path))
    assert "DNS" not in text and not any(step in text for step in cli.FIRST_STEPS)
    assert text.startswith(f"testbed up in {tmp_path}\n")
