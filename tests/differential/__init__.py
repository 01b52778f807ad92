"""The differential corpus: the same pod scenarios on nodeagent and on the upstream kubelet, compared.

Each scenario (scenarios/*.yaml) is a set of manifests plus actions. The runner plays it on one agent after the other
on ONE testbed, records every pod status a watch shows and the events about the pods, normalises what must differ
(names, UIDs, IPs, times, container IDs), and compares the sequences of distinct states, never their timing.
See docs/differential.md for how to run it.
"""
