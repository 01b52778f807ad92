"""The fuzzer (issue 34): hypothesis-driven targets over the agent's parsing and validation entry points.
`python3 -m tests.fuzz --help`; `docs/reliability.md`, "Fuzzing"."""
