"""CNI plugin executable and IPAM (bridge + veth via pyroute2). Lands with the CNI issue."""
