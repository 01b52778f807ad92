"""What the fleet shards' image holds, from this machine's interpreter: the interpreter and its libraries, the
standard library without its tests and Tk, nodeagent's dependencies (and not the dev tools installed beside them),
nodeagent's own packages from where they are imported, no bytecode; and its entrypoint.

The file selection is under test, not the layer (images._build, tested with the other images);
tests/integration/test_fleet_shards.py runs the built image as pods.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import nodeagent
from nodeagent.testbed import fleetimage, images
from nodeagent.testbed.fleetimage import Interpreter


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return fleetimage.fleet_image_files(
        Interpreter.running(), fleetimage.dependency_closure(), fleetimage._package_dirs()
    )


def _image(path: Path) -> str:
    return str(path).lstrip("/")


def test_the_interpreter_and_every_library_it_and_its_extension_modules_load(files: dict[str, Path]) -> None:
    interpreter = Interpreter.running()
    assert files[_image(interpreter.executable)] == interpreter.executable
    ssl = importlib.util.find_spec("_ssl")
    assert ssl is not None and ssl.origin is not None
    for program in (str(interpreter.executable), ssl.origin):
        listed = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
        for library in images.parse_ldd(listed):
            assert files[library.lstrip("/")] == Path(library), (program, library)


def test_the_standard_library_without_its_tests_tk_or_static_build(files: dict[str, Path]) -> None:
    stdlib = Interpreter.running().stdlib
    for module in ("os.py", "asyncio/base_events.py", "encodings/utf_8.py", "ssl.py", "json/decoder.py"):
        assert files[_image(stdlib / module)] == stdlib / module
    assert any(p.startswith(_image(stdlib / "lib-dynload" / "_asyncio.")) for p in files)
    left_out = [stdlib / d for d in ("test", "tkinter", "idlelib", "ensurepip", "lib2to3")]
    assert not [p for p in files if any(p.startswith(_image(d) + "/") for d in left_out)]
    # What is under site-packages comes from the dependencies and nodeagent, not from a walk of the directory.
    site = Interpreter.running().site_packages
    assert not [p for p in files if p.startswith(_image(site / "pip") + "/")]
    assert not [p for p in files if Path(p).parent.name.startswith("config-") or "/lib-dynload/_test" in p]
    assert not [p for p in files if "__pycache__" in p or p.endswith(".pyc")]


def test_nodeagents_dependencies_and_not_the_dev_tools(files: dict[str, Path]) -> None:
    names = {dist.metadata["Name"].lower().replace("_", "-") for dist in fleetimage.dependency_closure()}
    # Direct (pyproject.toml) and transitive (httpx -> httpcore -> h11; cryptography -> cffi).
    assert {"grpcio", "protobuf", "httpx", "httpcore", "h11", "cryptography", "cffi", "pyyaml", "psutil"} <= names
    assert not names & {"pytest", "mypy", "ruff", "matplotlib", "hypothesis", "grpcio-tools", "nodeagent"}
    site = Interpreter.running().site_packages
    for module in ("grpc", "httpx", "yaml", "psutil", "pyroute2", "google/protobuf"):
        assert _image(site / module / "__init__.py") in files, module
    assert not [p for p in files if p.startswith(_image(site / "_pytest") + "/") or "/mypy/" in p]


def test_nodeagents_packages_from_where_they_are_imported(files: dict[str, Path]) -> None:
    site = Interpreter.running().site_packages
    source = Path(nodeagent.__file__).parent  # this worktree's copy under PYTHONPATH, not the editable install's
    assert files[_image(site / "nodeagent" / "__main__.py")] == source / "__main__.py"
    assert files[_image(site / "nodeagent" / "fleet" / "command.py")] == source / "fleet" / "command.py"
    for package in ("cri", "cni", "csi", "pleg", "eviction"):
        assert _image(site / package / "__init__.py") in files


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("httpx>=0.27", "httpx"),
        ("PyYAML>=6.0", "PyYAML"),
        ('pytest>=8; extra == "dev"', None),
        ("exceptiongroup>=1.0.2; python_version < '3.11'", "exceptiongroup"),
        ("zope.interface", "zope.interface"),
    ],
)
def test_requirement_names(requirement: str, name: str | None) -> None:
    assert fleetimage._requirement_name(requirement) == name


def test_the_entrypoint_is_the_interpreter_running_nodeagent() -> None:
    config = fleetimage.image_config(Interpreter.running())
    assert config["Entrypoint"] == [str(Path(sys.executable).resolve()), "-m", "nodeagent"]
    assert config["Cmd"] == ["fleet", "--help"]
    assert "HOME=/root" in config["Env"]  # type: ignore[operator]


def test_packages_go_where_the_images_interpreter_looks_whatever_their_host_place() -> None:
    """As from a venv, whose site-packages the image's interpreter (no pyvenv.cfg) would not search: the
    dependencies and nodeagent go under the interpreter's own site-packages."""
    running = Interpreter.running()
    elsewhere = Interpreter(running.executable, running.stdlib, Path("/opt/site-packages"))
    files = fleetimage.fleet_image_files(elsewhere, fleetimage.dependency_closure(), fleetimage._package_dirs())
    assert "opt/site-packages/httpx/__init__.py" in files
    assert files["opt/site-packages/nodeagent/__main__.py"] == Path(nodeagent.__file__).parent / "__main__.py"
    assert not [p for p in files if p.startswith(_image(running.site_packages) + "/")]
