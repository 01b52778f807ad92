"""Graceful node shutdown (upstream: pkg/kubelet/nodeshutdown): a systemd-logind delay inhibitor lock, and on
PrepareForShutdown the pods stopped by priority group before the lock is let go.

`manager` holds the decisions (the periods, the groups, admission, the shutdown's steps); `logind` is the bus."""
