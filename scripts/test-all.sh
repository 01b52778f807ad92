#!/usr/bin/env bash
# Installs everything nodeagent needs on a fresh Debian 12 machine (as root), then runs every check and test:
# ruff (lint + format), mypy --strict, the import rules, pytest (unit + integration on a real testbed), and the CI
# subset of the upstream [NodeConformance] specs (`nodeagent conformance --subset ci`), and the Vagrant VM test.
# .ci/run calls this script; the README names it.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s ==\n' "$*"; }

step "python packages"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[dev]'

step "testbed install (Debian packages, control plane, upstream kubelet, kubeadm, CSI stack and KWOK builds; cached after the first run)"
python3 -m nodeagent testbed install --with-kubelet --with-csi --with-kubeadm --with-kwok

step "vm install (QEMU, libvirt, Vagrant, mmdebstrap for the Vagrant VM's tests)"
python3 -m nodeagent vm install

step "ruff check";        python3 -m ruff check .
step "ruff format";       python3 -m ruff format --check .
step "mypy --strict";     python3 -m mypy
step "import rules";      python3 -c "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
step "pytest";            python3 -m pytest --durations=30 "$@"
# The upstream e2e suite's fixed CI subset (nodeagent/conformance/subset.py) on a testbed of its own; the first run
# builds e2e.test and ginkgo (cached). Fails on any failed spec, or when the subset selects another number of specs.
step "conformance (CI subset of [NodeConformance])"
python3 -m nodeagent conformance --subset ci --dir "$(mktemp -d /tmp/nodeagent-conformance-XXXXXX)"
# kubeadm's addons (kube-proxy, CoreDNS) and the nodes' network (NodePort, hostPort, 10250, webhook, DNS on every
# node) on 2- and 3-node nodeagent clusters, and `nodeagent up`'s cluster DNS as a newcomer uses it (marker `cluster`,
# deselected from the pytest step: minutes of kubeadm, and the host's kube-proxy, which the session testbed holds).
# test_dra_cluster.py (upstream's two multi-node DRA specs on `cluster up --preset devices`, about 150 s) has the same
# marker but is a documented run, not a CI step: CI's cold time is at its budget (docs/devices.md).
step "kubeadm cluster: addons and network; nodeagent up's cluster DNS"
python3 -m pytest -m cluster tests/integration/test_kubeadm_addons.py tests/integration/test_cluster_network.py \
    tests/integration/test_up_dns.py
# The Vagrant VM end to end (marker `vm`, deselected from the pytest step): builds the box (cached), boots it under
# libvirt, runs static pods in it, destroys it (about 5 min warm, 7 cold).
step "KWOK beside the fleet (its controller on a testbed)"
python3 -m pytest -m kwok tests/integration/test_kwok.py
step "vagrant VM (static pods in a real VM)"
python3 -m pytest -m vm tests/integration/test_vm_vagrant.py
