"""nodeagent: a kubelet written in Python."""

__version__ = "0.1.0"
