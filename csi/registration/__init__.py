"""Kubelet plugin registration (pluginregistration v1) as upstream's plugin manager does it.

`v1/` holds the project's own proto of the registration API and its generated stubs; `watcher` watches the plugin
registry directory, asks each plugin socket who it is, and hands plugins to handlers by type. Nothing here knows
nodeagent: the CSI handler that writes CSINode lives in nodeagent/pluginmanager.
"""
