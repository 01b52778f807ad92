"""Reading a KubeletConfiguration file: bytes → YAML (or JSON) → decoded, defaulted and validated config.

Everything a user can get wrong comes back as one `ConfigError` listing every problem; what the agent can run with
but the user may want to know (unknown or ignored fields, duplicate keys) comes back as warnings next to the config,
for the caller to log. The file is parsed with PyYAML's safe loader; a subclass of it only adds duplicate-key
detection, which upstream's strict decoding reports the same way (and then, like unknown fields, only warns about).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from nodeagent.config.errors import ConfigError
from nodeagent.config.kubelet_config import KubeletConfiguration
from nodeagent.config.schema import decode_document, show
from nodeagent.config.validation import validate

MAX_CONFIG_BYTES = 1 << 20  # a kubelet config is a few KiB; anything past 1 MiB is a wrong path, not a config


@dataclass(frozen=True)
class LoadedConfig:
    config: KubeletConfiguration
    warnings: tuple[str, ...] = ()


class _DuplicateKeyLoader(yaml.SafeLoader):
    """The safe loader, recording keys that a mapping repeats (the last value wins, as in upstream's lenient pass)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    line = key_node.start_mark.line + 1
                    self.duplicates.append(f'duplicate field "{key_node.value}" (line {line}); the last value is used')
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, source: str) -> tuple[object, list[str]]:
    try:
        # The reader checks the characters as the loader is made: a control character fails here already.
        loader = _DuplicateKeyLoader(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML or JSON: {e}") from e
    try:
        return loader.get_single_data(), loader.duplicates
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML or JSON: {e}") from e
    except RecursionError as e:  # the pure-Python composer recurses once per nesting level
        raise ConfigError(f"{source}: not valid YAML or JSON: it nests too deeply") from e
    finally:
        loader.dispose()


def parse_config(text: str, *, source: str = "config") -> LoadedConfig:
    """Parse, default and validate a KubeletConfiguration given as text; `source` names it in messages."""
    doc, warnings = _parse_yaml(text, source)
    if doc is None:
        raise ConfigError(f"{source}: empty; expected a KubeletConfiguration document")
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a KubeletConfiguration mapping, got {show(doc)}")
    config, decode_warnings = decode_document(doc, source=source)
    found = validate(config)
    if found.problems:
        raise ConfigError(f"{source}: invalid KubeletConfiguration", found.problems)
    return LoadedConfig(config=config, warnings=(*warnings, *decode_warnings, *found.warnings))


def load_config(path: Path) -> LoadedConfig:
    """Read a KubeletConfiguration file (YAML or JSON). Raises `ConfigError` for anything that makes it unusable."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # read no more than needed to know it is too big
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from e
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a kubelet config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from e
    return parse_config(text, source=str(path))
