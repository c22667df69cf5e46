"""The web config file's YAML read node by node, so that every error names its line."""

from __future__ import annotations

import os

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class WebConfigError(ValueError):
    """A bad web config file; the message names the file and line."""


class ConfigReader:
    """Walks PyYAML's node tree so every error can point at its line."""

    def __init__(self, path: str):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))

    def error(self, node: Node, message: str) -> WebConfigError:
        return WebConfigError(f"{self.path}:{node.start_mark.line + 1}: {message}")

    def mapping(self, node: Node, what: str, allowed: set[str]) -> dict[str, Node]:
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return {}
        if not isinstance(node, MappingNode):
            raise self.error(node, f"{what} must be a mapping")
        out: dict[str, Node] = {}
        for key, value in node.value:
            name = self.string(key, "a key")
            if name not in allowed:
                raise self.error(
                    key, f"unknown key {name!r} in {what} (known: {', '.join(sorted(allowed))})"
                )
            if name in out:
                raise self.error(key, f"{name!r} given twice in {what}")
            out[name] = value
        return out

    def string(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or node.tag == "tag:yaml.org,2002:null":
            raise self.error(node, f"{what} must be a string")
        return node.value

    def choice(self, node: Node, what: str, choices) -> str:
        value = self.string(node, what)
        if value not in choices:
            raise self.error(node, f"{what}: {value!r} is not one of {', '.join(choices)}")
        return value

    def boolean(self, node: Node, what: str) -> bool:
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.error(node, f"{what} must be true or false")
        return node.value.lower() in ("true", "yes", "on")

    def strings(self, node: Node, what: str) -> tuple[str, ...]:
        if not isinstance(node, SequenceNode):
            raise self.error(node, f"{what} must be a list")
        return tuple(self.string(item, f"an item of {what}") for item in node.value)

    def file(self, node: Node, what: str) -> str:
        value = self.string(node, what)
        resolved = os.path.join(self.base, value)
        if not os.path.isfile(resolved):
            raise self.error(node, f"{what}: no such file: {resolved}")
        return resolved
