"""The testbed: a hermetic set of real parts (containerd, etcd, apiserver, scheduler, controller-manager, registry)."""
