"""`python -m cni`: the plugin in process (with CNI_* set), or an operator's command.

python -m cni install --bin-dir /opt/cni/bin [--helper-socket /run/nodeagent-bridge.sock]
python -m cni helper --socket /run/nodeagent-bridge.sock
CNI_COMMAND=VERSION python -m cni < /dev/null
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def command_line(argv: list[str], *, default_socket: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodeagent-bridge", description="nodeagent's CNI plugin")
    sub = parser.add_subparsers(dest="command", required=True)
    helper = sub.add_parser("helper", help="run the resident helper that serves the plugin's calls")
    helper.add_argument("--socket", type=Path, default=Path(default_socket) if default_socket else None)
    inst = sub.add_parser("install", help="write the plugin executable into a CNI bin dir")
    inst.add_argument("--bin-dir", type=Path, required=True)
    inst.add_argument("--helper-socket", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "helper":
        if args.socket is None:
            parser.error("helper needs --socket")
        from cni.helper import run

        return run(args.socket)
    from cni.install import install

    installed = install(args.bin_dir, helper_socket=args.helper_socket)
    print(installed.path)
    return 0


def main() -> int:
    if len(sys.argv) > 1:
        return command_line(sys.argv[1:])
    if "CNI_COMMAND" not in os.environ:
        print("nodeagent-bridge is a CNI plugin: set CNI_COMMAND (see --help for its commands)", file=sys.stderr)
    from cni.plugin import run_in_process

    return run_in_process(dict(os.environ), sys.stdin.buffer.read())


if __name__ == "__main__":
    sys.exit(main())
