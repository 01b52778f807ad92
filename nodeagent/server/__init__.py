"""The kubelet API on :10250 (upstream pkg/kubelet/server): an h11 server with TLS, authentication and authorization
as the kubelet does them, container logs, the exec/attach/portForward proxy to the runtime's streaming server, and
the agent's metrics."""
