"""Node, pod and container statistics (upstream pkg/kubelet/stats and pkg/kubelet/server/stats): the one provider
that the kubelet API's /stats/summary and /metrics/{resource,cadvisor} read, and the eviction manager after them.

- `types`: the Summary API's values and their JSON; `summary`: building them (pure);
- `cgroups`, `host`: reading cgroupfs, statvfs, /proc and psutil; `cpu`: usageNanoCores from two samples;
- `provider.StatsProvider`: the CRI calls and host reads of one request, put together;
- `resource_metrics`, `cadvisor`, `exposition`: the Prometheus text of /metrics/resource and /metrics/cadvisor.
"""
