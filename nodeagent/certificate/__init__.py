"""Certificates the agent obtains from the cluster (upstream pkg/kubelet/certificate): the kubelet API's serving
certificate through the kubernetes.io/kubelet-serving signer."""
