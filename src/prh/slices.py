"""Config slices: the params.yaml keys a command reads, handed over once.

A command declares the keys it reads, by block (``CONFIG = {"alignment": ("topk", "quantile")}``; a nested block by
its dotted path, ``"downstream.harness"``), in a module the workflow can import without torch. Its rule hands them
over as one JSON argument, ``--config '{"alignment": {"quantile": 0.95, "topk": 10}}'`` (:func:`slice_arg`), and the
command reads them back with the function :func:`add_slice` returns: a key the JSON leaves out takes its schema
default, any key can also be set by its own flag (``--topk 5``, for a run by hand), and the values are checked against
the schema, so a bad one is a single error naming its key. The schema stays the one declaration of a key (type, range,
default, help): the flags are generated from it, never typed again in the command.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from collections.abc import Callable, Mapping

from prh.config import SCHEMA, load_schema, resolve_ref, schema_defaults, schema_validator
from prh.errors import UsageError

__all__ = ["add_slice", "block_keys", "slice_arg", "slice_values"]

Keys = Mapping[str, tuple[str, ...]]  # block -> the keys of it a command reads
_TYPES = {"integer": int, "number": float, "string": str}


def _walk(tree: Mapping, block: str) -> Mapping:
    for part in block.split("."):
        tree = tree[part]
    return tree


def slice_values(cfg: Mapping, keys: Keys) -> dict[str, dict]:
    """``{block: {key: value}}`` of ``keys`` from a (schema-filled) config."""
    return {block: {key: _walk(cfg, block)[key] for key in names} for block, names in keys.items()}


def slice_arg(cfg: Mapping, keys: Keys) -> str:
    """The slice as one shell-quoted JSON argument (sorted keys: the same values, the same string, so Snakemake's
    params trigger reruns only a job whose keys changed)."""
    return shlex.quote(json.dumps(slice_values(cfg, keys), sort_keys=True))


def _schema_at(path: str) -> dict:
    """The schema of the params.yaml key at a dotted ``path``, every ``$ref`` followed."""
    schema = root = load_schema(SCHEMA)
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part not in schema.get("properties", {}):
            raise ValueError(f"params.yaml block {'.'.join(parts[:i]) or '(top level)'} has no key {part!r} "
                             f"(its schema: {', '.join(schema.get('properties', {}))})")
        schema, root = resolve_ref(schema["properties"][part], root)
    return schema


def block_keys(block: str) -> tuple[str, ...]:
    """Every key of a block, from its schema: the slice of a command that reads the whole block."""
    return tuple(_schema_at(block)["properties"])


def _flag(spec: dict) -> dict:
    """argparse keywords of a flag for a key of this schema: its type, choices and description."""
    kinds = [k for k in (spec.get("type") if isinstance(spec.get("type"), list) else [spec.get("type")]) if k != "null"]
    kind = kinds[0] if len(kinds) == 1 else None  # several types (an integer or "all"): read as JSON, else as text
    if kind == "boolean":
        return {"action": argparse.BooleanOptionalAction, "metavar": None}
    if kind == "array":  # items of one plain type, or of several (e.g. 10 20 N-1): each read as JSON, else as text
        items = spec.get("items", {}).get("type")
        return {"nargs": "+", "type": _TYPES[items] if isinstance(items, str) and items in _TYPES else _scalar}
    if kind in _TYPES:
        return {"type": _TYPES[kind], **({"choices": spec["enum"], "metavar": None} if "enum" in spec else {})}
    return {"type": _scalar}  # an object, or one of several types (a number or "auto"): JSON, else the text


def _scalar(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def add_slice(parser: argparse.ArgumentParser, keys: Keys, *,
              config_only: tuple[str, ...] = ()) -> Callable[[argparse.Namespace], dict[str, dict]]:
    """Give ``parser`` the options of a slice: ``--config JSON`` and one flag per key (a flag wins over the JSON), but
    for the keys of ``config_only`` (whose flag name the command gives another meaning, e.g. a path it writes).
    Returns ``read(args) -> {block: {key: value}}``, each value checked against the schema (a ``UsageError`` names a bad
    or unknown key: one line, ``prh <command>: ...``)."""
    group = parser.add_argument_group("settings", "params.yaml keys; a key neither given nor in --config takes its "
                                                  "schema default (workflow/schemas)")
    group.add_argument("--config", type=slice_json, default={}, metavar="JSON",
                       help="the slice a rule hands over: " + json.dumps({b: list(k) for b, k in keys.items()}))
    dests = {}
    for block, names in keys.items():
        for key in names:
            flag = "--" + key.replace("_", "-")
            if flag in {"--" + k.replace("_", "-") for b, k in dests}:  # two blocks' keys of one name: the first's flag
                continue
            spec = _schema_at(f"{block}.{key}")
            description = " ".join(str(spec.get("description", "")).split()).replace("%", "%%")
            default = f" (default: {json.dumps(spec['default'])})" if "default" in spec else ""
            if key in config_only:
                continue
            dests[block, key] = f"slice__{block}__{key}"
            group.add_argument(flag, dest=dests[block, key], default=None,
                               help=f"{block}.{key}: {description}{default}", **{"metavar": key.upper(), **_flag(spec)})

    def read(args: argparse.Namespace) -> dict[str, dict]:
        given = args.config
        for block in given:
            extra = sorted(set(given[block]) - set(keys.get(block, ()))) if isinstance(given[block], dict) else None
            if block not in keys or extra:
                raise UsageError(f"--config: {block}.{', '.join(extra or ['*'])} is not read by this command; it reads "
                                 + ", ".join(f"{b}.{k}" for b, names in keys.items() for k in names))
        values = {}
        for block, names in keys.items():
            first, *rest = block.split(".")
            defaults = _walk(schema_defaults(first), ".".join(rest)) if rest else schema_defaults(first)
            values[block] = {}
            for key in names:
                flag = getattr(args, dests.get((block, key), ""), None)
                if flag is not None:
                    values[block][key] = flag
                elif key in given.get(block, {}):
                    values[block][key] = given[block][key]
                elif key in defaults:
                    values[block][key] = defaults[key]
                else:
                    raise UsageError(f"{block}.{key} has no default: give --{key.replace('_', '-')} "
                                     "or put it in --config")
                if problem := _unrepresentable(values[block][key]):
                    raise UsageError(f"{block}.{key}: {problem}")
        nested: dict = {}  # the values where they sit in params.yaml, for the schema
        for block, given_values in values.items():
            node = nested
            for part in block.split("."):
                node = node.setdefault(part, {})
            node.update(given_values)
        read_paths = {(*block.split("."), key) for block, names in keys.items() for key in names}
        problems = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                    for e in schema_validator(fill_defaults=False).iter_errors(nested)
                    if any(tuple(e.absolute_path)[:len(path)] == path for path in read_paths)]
        if problems:
            raise UsageError("invalid settings: " + "; ".join(sorted(problems)))
        # keys in sorted order at every level, as the JSON a rule hands over holds them (results that record a
        # setting keep one order, whether it came from the rule, a flag or a default)
        return {block: _sorted(block_values) for block, block_values in values.items()}

    return read


def _sorted(value):
    return {k: _sorted(v) for k, v in sorted(value.items())} if isinstance(value, dict) else value


def _unrepresentable(value) -> str | None:
    """What makes a value no setting can take (a JSON schema has no word for either): an integer beyond 64 bits
    (numpy and torch overflow on it, or allocate for it), a float that is not finite."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -2 ** 63 <= value < 2 ** 63:
        return f"{value} is beyond 64-bit integers"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((problem for item in items if (problem := _unrepresentable(item))), None)


def slice_json(text: str) -> dict:
    """argparse ``type=`` of ``--config``: a JSON object of blocks, each an object of its keys."""
    from prh.io import json_object

    value = json_object(text)
    if not all(isinstance(v, dict) for v in value.values()):
        raise argparse.ArgumentTypeError('must map each params.yaml block to its keys: {"block": {"key": value}}')
    return value
