"""The web config file's YAML read node by node, so that every error names its line.

Errors go to the log, so they never echo a value that may be a secret: a private key
pasted where a file name belongs is named by its field and line, never shown (`shown`).
"""

from __future__ import annotations

import os
import re

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# Linux's limits on a path and on one name in it: a longer value is no file name.
PATH_MAX, NAME_MAX = 4096, 255
# Base64 without a separator for this long is encoded key material, not a name: PEM's
# lines are 64 characters, and a key pasted as one line has runs of ~64 between its "/".
ENCODED_RUN = re.compile(r"[A-Za-z0-9+=]{40,}")


def secret_like(value: str) -> str | None:
    """What makes `value` unfit to be shown (it may be key material), or None."""
    if "-----BEGIN" in value or "PRIVATE KEY" in value:
        return "looks like PEM text (a key or a certificate)"
    if len(value) > PATH_MAX:
        return f"is {len(value)} characters long, longer than a path can be ({PATH_MAX})"
    if not value.isprintable():
        return "holds line breaks or control characters"
    if any(len(name) > NAME_MAX for name in value.split("/")):
        return f"has a name longer than a file name can be ({NAME_MAX})"
    if ENCODED_RUN.search(value):
        return "looks like encoded key material (a long run of base64)"
    return None


def shown(value: str) -> str:
    """`value` quoted for an error message, or a description of it when it may be secret."""
    why = secret_like(value)
    return repr(value) if why is None else f"a value that {why} (not shown)"


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
                    key,
                    f"unknown key {shown(name)} in {what} (known: {', '.join(sorted(allowed))})",
                )
            if name in out:
                raise self.error(key, f"{shown(name)} given twice in {what}")
            out[name] = value
        return out

    def string(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or node.tag == "tag:yaml.org,2002:null":
            raise self.error(node, f"{what} must be a string")
        return node.value

    def choice(self, node: Node, what: str, choices) -> str:
        value = self.string(node, what)
        if value not in choices:
            raise self.error(node, f"{what}: {shown(value)} is not one of {', '.join(choices)}")
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
        why = secret_like(value)
        if why is not None:
            raise self.error(
                node, f"{what} must be the path of a file, and its value {why} (not shown)"
            )
        resolved = os.path.join(self.base, value)
        if not os.path.isfile(resolved):
            raise self.error(node, f"{what}: no such file: {resolved}")
        return resolved
