"""The runtime manager's pure half: pod → CRI configs and actions (upstream: pkg/kubelet/kuberuntime).

Every module here is a pure function of its inputs (pod dicts as the apiserver returns them, CRI messages, an injected
clock value); the part that talks to the runtime calls these and sends the result. Tests drive them with tables.
"""
