"""Pod lifecycle event generator: relist and evented PLEG, pod status cache. Lands with the PLEG issue."""
