"""The image of `nodeagent fleet` shards: this machine's Python interpreter, the part of its standard library a
program uses, the installed dependencies of nodeagent and nodeagent's own packages, in one layer.

No registry is reachable here and there is no Python base image, so the image is made from the host's files, at the
paths they have on the host: the interpreter finds its standard library and its site-packages from its own place
(`sys.prefix` from the executable's path), with no PYTHONPATH and no venv. What goes in:
- the interpreter (`sys.executable`, resolved) and, as for the other host programs (`images.host_program_files`),
  every shared object `ldd` lists for it and for each extension module taken (libpython, libc, libssl, libffi...);
- the standard library without what a fleet never imports: its tests, IDLE, Tk, turtledemo, ensurepip, lib2to3,
  the static build (`config-*`) and the test extension modules of lib-dynload;
- the distributions nodeagent requires (its metadata, extras left out) and theirs, transitively: the files their
  RECORD lists, found where pip put them (`importlib.metadata`); not the dev tools installed beside them;
- nodeagent's packages (`PACKAGES`), from where they are imported: a worktree on PYTHONPATH gives its own copy.
No `__pycache__`: bytecode is compiled when a shard starts, into the container's own layer. The host's would be
stale in the image (checked against source mtimes, and the layer's are fixed); compiling it here would save about
1 s of a start (docs/fleet.md).

The cache key (`images._build`) is the digest of every file's path and content, so any change of the code or of an
installed package rebuilds the image, and nothing else does.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import ImageBuildError, OCIImage, TarEntry

# nodeagent's top-level packages (pyproject.toml, [tool.setuptools.packages.find]).
PACKAGES = ("nodeagent", "cri", "cni", "csi", "pleg", "eviction")
DISTRIBUTION = "nodeagent"
# Standard library directories a fleet never imports; with `config-*`, the static libpython (44 MiB here).
STDLIB_LEFT_OUT = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3")
# Extension modules of lib-dynload that only CPython's own tests and Tk use.
DYNLOAD_LEFT_OUT = re.compile(r"^(_test|_ctypes_test|_xxtestfuzz|_xxsubinterpreters|xxlimited|_tkinter)")
FLEET_COMPRESSLEVEL = 1
# Root's entries, for a library that looks up the current user (pwd) or its home.
PASSWD = b"root:x:0:0:root:/root:/sbin/nologin\n"
GROUP = b"root:x:0:\n"


@dataclass(frozen=True)
class Interpreter:
    """Where the files of a Python installation are on this machine."""

    executable: Path
    stdlib: Path
    site_packages: Path

    @classmethod
    def running(cls) -> Interpreter:
        """The interpreter running this code. In a venv, its base interpreter's site-packages: the image has no
        pyvenv.cfg, so the venv's packages go where the base interpreter looks."""
        paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        return cls(Path(sys.executable).resolve(), Path(paths["stdlib"]), Path(paths["purelib"]))


def _requirement_name(text: str) -> str | None:
    """The distribution a Requires-Dist line names, or None when it is only for an extra."""
    name, _, marker = text.partition(";")
    if "extra" in marker:
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)
    if match is None:
        raise ImageBuildError(f"cannot read the requirement {text!r}")
    return match.group(1)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_closure(root: str = DISTRIBUTION) -> list[importlib.metadata.Distribution]:
    """The installed distributions `root` requires, transitively, without extras, sorted by name; `root` itself
    not. A requirement with a marker (a platform or Python version) that is not installed is not needed here."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(root, "")]
    while todo:
        name, marker = todo.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            if marker:
                continue
            raise ImageBuildError(
                f"{name} is not installed: pip install -e . installs nodeagent's dependencies"
            ) from None
        key = _canonical(dist.metadata["Name"])
        if key in found:
            continue
        if name != root:
            found[key] = dist
        for requirement in dist.requires or []:
            required = _requirement_name(requirement)
            if required is not None:
                todo.append((required, requirement.partition(";")[2].strip()))
    return [found[key] for key in sorted(found)]


def _walk(top: Path) -> Iterator[Path]:
    for path in sorted(top.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        yield path


def _stdlib_files(interpreter: Interpreter) -> Iterator[Path]:
    for path in _walk(interpreter.stdlib):
        first = path.relative_to(interpreter.stdlib).parts[0]
        if first in STDLIB_LEFT_OUT or first.startswith("config-"):
            continue
        if first == "lib-dynload" and DYNLOAD_LEFT_OUT.match(path.name):
            continue
        yield path


def _distribution_files(dist: importlib.metadata.Distribution) -> Iterator[tuple[Path, Path]]:
    """(path relative to the distribution's site-packages, host file) of each file its RECORD lists."""
    for record in dist.files or []:
        if record.parts[0] == ".." or "__pycache__" in record.parts:
            continue  # scripts in bin/, and bytecode
        path = Path(str(dist.locate_file(record)))
        if path.is_file():
            yield Path(*record.parts), path


def _package_dirs() -> dict[str, Path]:
    dirs = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ImageBuildError(f"the package {name} is not importable")
        dirs[name] = Path(next(iter(spec.submodule_search_locations)))
    return dirs


def fleet_image_files(
    interpreter: Interpreter,
    distributions: list[importlib.metadata.Distribution],
    packages: Mapping[str, Path],
) -> dict[str, Path]:
    """Image path (relative, no leading /) -> host file: everything the layer holds but its own small files."""
    files: dict[str, Path] = {}
    for path in _stdlib_files(interpreter):
        files[str(path).lstrip("/")] = path
    for dist in distributions:
        for relative, path in _distribution_files(dist):
            files[str(interpreter.site_packages / relative).lstrip("/")] = path
    for name, directory in packages.items():
        for path in _walk(directory):
            files[str(interpreter.site_packages / name / path.relative_to(directory)).lstrip("/")] = path
    programs = {str(interpreter.executable).lstrip("/"): interpreter.executable}
    programs.update({image: host for image, host in files.items() if ".so" in Path(image).suffixes})
    # The interpreter, the extension modules and the libraries ldd lists for each (the image has no ld.so.cache:
    # glibc's default paths and each binary's RUNPATH must find them where they are on the host).
    files.update(images.host_program_files(programs))
    return files


def image_config(interpreter: Interpreter) -> dict[str, object]:
    return {
        "Entrypoint": [str(interpreter.executable), "-m", "nodeagent"],
        "Cmd": ["fleet", "--help"],
        "Env": [images.DEFAULT_PATH, "HOME=/root", "PYTHONUNBUFFERED=1"],
        "WorkingDir": "/",
        "StopSignal": "SIGTERM",
    }


def build_fleet_image(dest: Path, interpreter: Interpreter | None = None) -> OCIImage:
    """The shard image in an OCI layout at `dest` (reused when every file is as it was): the entrypoint is
    `python -m nodeagent`, so a pod's args are `fleet --nodes N ...`."""
    interpreter = interpreter or Interpreter.running()
    files = fleet_image_files(interpreter, dependency_closure(), _package_dirs())
    contents = {path: source.read_bytes() for path, source in sorted(files.items())}
    inputs = {
        "image": "nodeagent-fleet",
        "files": images.sha256_digest(
            b"".join(
                path.encode() + b"\0" + images.sha256_digest(data).encode() + b"\n" for path, data in contents.items()
            )
        ),
        "passwd": images.sha256_digest(PASSWD),
        "group": images.sha256_digest(GROUP),
        "architecture": images.host_architecture(),
    }

    def entries() -> list[TarEntry]:
        own = [
            TarEntry.file("etc/passwd", PASSWD),
            TarEntry.file("etc/group", GROUP),
            TarEntry.directory("tmp", mode=0o1777),
            TarEntry.directory("root", mode=0o700),
        ]
        mode = {path: 0o755 if source.stat().st_mode & 0o111 else 0o644 for path, source in files.items()}
        return images.with_parent_directories(
            own + [TarEntry.file(path, data, mode=mode[path]) for path, data in contents.items()]
        )

    # gzip level 1: 106 MiB of mostly binaries; level 9 took most of a build's minute for a few MiB less.
    return images._build(dest, inputs, entries, image_config(interpreter), compresslevel=FLEET_COMPRESSLEVEL)
