"""YAML as the config files need it: PyYAML's safe loader, refusing what it lets through silently.

- a key given twice in one mapping (PyYAML, and so Snakemake, keep the last one; DVC refuses the file);
- more than ``MAX_ALIASES`` aliases (``*name``), or aliases that expand to more than ``MAX_EXPANDED_NODES`` values: ten
  lines of nested aliases expand to billions of nodes, which hung the config check for over a minute at 1.5 GB; a
  config has no need for them beyond sharing a few blocks.

Both are a ``yaml.YAMLError`` with the line, so ``prh.config.load`` names file, line and column as for any broken YAML.
"""

from __future__ import annotations

import re

import yaml

__all__ = ["MAX_ALIASES", "MAX_EXPANDED_NODES", "StrictLoader", "safe_load"]

MAX_ALIASES = 100
MAX_EXPANDED_NODES = 1_000_000  # params.yaml holds about 5,000


class _NoDuplicates:
    """A constructor mixin: a mapping that gives a key twice is an error naming both lines."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class names it
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"key {key!r} appears twice (first on line {first.start_mark.line + 1}); keep one",
                        key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


class _FastLoader(_NoDuplicates, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The C parser (no aliases to count: used for text without anchors)."""


class StrictLoader(_NoDuplicates, yaml.SafeLoader):
    """``yaml.SafeLoader`` with duplicate keys and more than ``MAX_ALIASES`` aliases refused."""

    def __init__(self, stream):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {MAX_ALIASES} aliases (*name): refused, as aliases of aliases expand "
                    "without bound; write the values out", self.peek_event().start_mark)
        return super().compose_node(parent, index)


def safe_load(text: str):
    """``yaml.safe_load`` of ``text`` with duplicate keys and alias floods refused. Text without an anchor (``&name``;
    a config's comments use '& ' at most) takes PyYAML's C parser: params.yaml loads in 11 ms instead of 85."""
    if not re.search(r"&[^\s&]", text):
        loader = _FastLoader(text)
        try:
            return loader.get_single_data()
        except yaml.YAMLError:
            pass  # parsed again below: the Python parser's message (the C one words some errors differently)
        finally:
            loader.dispose()
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases (*name) expand to more than {MAX_EXPANDED_NODES:,} values: refused (an "
                "alias bomb); write the values out", node.start_mark)
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node, memo: dict) -> int:
    """Values ``node`` holds once every alias is expanded (shared nodes counted once per use), by memo: linear time."""
    if memo.get(id(node), 1) is None:
        raise yaml.constructor.ConstructorError(None, None, "an alias (*name) inside the value it names: refused (it "
                                                "never ends)", node.start_mark)
    if id(node) not in memo:
        memo[id(node)] = None  # in progress
        children = (node.value if isinstance(node, yaml.SequenceNode) else
                    [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        memo[id(node)] = min(1 + sum(_expanded_size(c, memo) for c in children), 1 << 62)
    return memo[id(node)]
