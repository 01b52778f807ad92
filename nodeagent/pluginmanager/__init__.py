"""The kubelet's plugin manager for CSI drivers: csi.registration's watcher, and the CSI handler behind it.

`registry` keeps the registered drivers (what the kubernetes.io/csi volume plugin dials), `nodeinfo` writes the
node's CSI facts to the API (the nodeid annotation, topology labels, the CSINode object), `csihandler` validates and
registers drivers as upstream's csi.RegistrationHandler, and `manager` puts them together for the agent.
"""
