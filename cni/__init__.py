"""nodeagent's pod network: a CNI plugin (`nodeagent-bridge`) with its own IPAM, bridge and veths through pyroute2.

Since Kubernetes 1.24 the container runtime, not the kubelet, runs CNI: containerd execs the plugin found in its CNI
bin dir for every sandbox. Starting Python and importing pyroute2 for every exec costs ~40x the reference Go plugin,
so the executable is a thin shim (`cni.shim`, standard library only, `python -IS`) that forwards the call to a
resident helper (`cni.helper`) over a unix socket, and does the work itself when no helper answers.

This module stays empty: the shim imports `cni.shim` on every exec, and whatever lives here would be paid each time.
"""
