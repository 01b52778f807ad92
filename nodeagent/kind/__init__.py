"""kind support (issue 36): Docker from Debian, isolated from the testbed, and the go/no-go check that a systemd node
container boots on this host (docs/kind.md)."""
