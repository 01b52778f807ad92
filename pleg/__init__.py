"""Pod lifecycle event generator: what changed in the runtime, without every pod worker polling it.

`generic` relists (GenericPLEG), `evented` follows CRI container events (EventedPLEG), `cache` holds each pod's
last known status for the pod workers, `health` judges the relist's age for the node's Ready condition. The package
knows nothing of `nodeagent` (import-linter checks it); `generator` is the interface the agent uses.
"""
