"""Install the `nodeagent-bridge` executable into a CNI bin dir.

containerd runs the plugin with nothing but the CNI_* variables (and its own environment, which a plugin should not
rely on), so the executable carries what it needs: the interpreter on its `#!` line (`-IS`: no site, no PYTHON*
variables), the directories holding the `cni` package and pyroute2 as seen by the installing interpreter (the
repository of a `pip install -e .` and its site-packages), and the helper's socket. It works the same from a clean
clone, a worktree or an installed wheel, and never picks up another checkout through a .pth file.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import cni

PLUGIN_NAME = "nodeagent-bridge"
MAX_SHEBANG = 255


@dataclass(frozen=True)
class InstalledPlugin:
    path: Path
    interpreter: str
    helper_socket: Path | None

    def helper_argv(self) -> list[str]:
        """The resident helper's command line, as /proc shows it once the kernel has read the `#!` line."""
        if self.helper_socket is None:
            raise ValueError("this plugin was installed without a helper socket")
        return [self.interpreter, "-IS", str(self.path), "helper", "--socket", str(self.helper_socket)]


def code_path() -> list[str]:
    """Where the running interpreter finds `cni` and its dependencies: the package's parent first."""
    root = str(Path(cni.__file__).resolve().parent.parent)
    entries = [root]
    for entry in sys.path:
        if entry and os.path.isabs(entry) and os.path.isdir(entry) and entry not in entries:
            entries.append(entry)
    return entries


def render(*, interpreter: str, helper_socket: Path | None, paths: list[str]) -> str:
    shebang = f"#!{interpreter} -IS"
    if len(shebang) > MAX_SHEBANG:
        raise ValueError(f"interpreter path {interpreter} is too long for a #! line ({MAX_SHEBANG} bytes)")
    return "\n".join(
        [
            shebang,
            f"# {PLUGIN_NAME}: the CNI plugin of nodeagent (cni/ package). Written by `python -m cni install`.",
            "# A thin shim: it forwards each call to the resident helper, or runs it here when none answers.",
            "import sys",
            f"sys.path[:0] = {paths[:1]!r}",
            "from cni.shim import main",
            f"main({str(helper_socket) if helper_socket else None!r}, {paths!r})",
            "",
        ]
    )


def install(
    bin_dir: Path,
    *,
    helper_socket: Path | None,
    interpreter: str = sys.executable,
    name: str = PLUGIN_NAME,
) -> InstalledPlugin:
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / name
    text = render(interpreter=interpreter, helper_socket=helper_socket, paths=code_path())
    tmp = target.with_name(f".{name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(target)  # atomic: a runtime exec'ing the plugin meanwhile sees the old file or the new one
    return InstalledPlugin(path=target, interpreter=interpreter, helper_socket=helper_socket)
