"""The errors of nodeagent.vm; the command line maps `VMError` to `nodeagent: <message>`."""


class VMError(RuntimeError):
    """Base of the Vagrant VM errors."""
