"""CSI proto, node client and plugin registration watcher. Lands with the CSI issue."""
