"""`nodeagent fleet`: many emulated nodes in one process, for control-plane scale work (hollow nodes).

Each node runs the agent's own logic (registration, lease, node status, admission, the syncLoop, pod workers, the
status manager, the PLEG, eviction and garbage collection: `nodeagent.agent.run_emulated_agent`) over its own
in-process fake runtime (`cri.fake`), in one event loop. `plan` is the pure part (names, addresses, the shared
config, start offsets); `node` builds and runs one node; `fleet` starts them staggered and stops them together;
`command` is the CLI.
"""
