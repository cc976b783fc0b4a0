"""Every fact written once: a value of params.yaml that equals its schema default is a second copy of it.

The schema files (workflow/schemas/*.schema.yaml) are the one home of defaults; the config check fills in every key
params.yaml leaves out (``prh.checks.check_config``, which the Snakefile runs before any rule reads the config), so a
key whose value equals its default can go without changing anything. Such a value stays only where a rule says why:

- ``required``: the schema lists the key as required (a hub dataset's split and image column, a model's revision);
- ``column``: a field of one entry of a name -> entry table (datasets, models, zoo runs, bridge arms) that a sibling
  entry sets to another value: a row reads against its siblings (a run's ``seed: 0`` beside another's ``seed: 1``);
- ``merged``: a mapping whose default has no defaults of its own keys: a layer that sets some of its keys
  (tests/smoke/params.yaml, a preset, a --configfile) is merged into it key by key, and the schema's default would
  not fill the keys the layer leaves out;
- ``KEPT`` below, one line each with its reason.

Run as a script to list every value of a config file that equals its default, with the rule that keeps it:
``python tests/test_params_defaults.py [params.yaml]``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Values equal to their default that params.yaml keeps on purpose (dotted key: why).
KEPT = {
    # the run's knobs, at the top of the file
    "seed": "the master seed: the first thing a rerun changes",
    "device": "auto | cpu | cuda: the machine's choice",
    "allow_unpinned": "the paper suite's guard against moving hub revisions: a user sees it is off",
    "cluster.gpu_memory_gb": "the cluster's card: every user of the paper suite sets it",
    "cluster.rates_file": "the cluster's measured rates: every user of the paper suite sets it",
    # the corpus's hub entry, read from the file itself (not the filled config) as a dataset's: `prh pin-revisions`
    # rewrites its revision in place, `prh hub-manifest` and `prh standin-hub` read its repo, split and column
    "paper.lm_score.repo": "hub entry: the repo `prh pin-revisions`, `prh hub-manifest`, `prh standin-hub` read",
    "paper.lm_score.revision": "hub entry: `prh pin-revisions` rewrites it to a commit SHA in params.yaml",
    "paper.lm_score.split": "hub entry: the split `prh hub-manifest` checks and `prh standin-hub` builds",
    "paper.lm_score.text_column": "hub entry: the column `prh hub-manifest` checks and `prh standin-hub` builds",
    # the paper suite's own settings, equal by coincidence to the offline suite's default that a key left out takes
    "lte.paper.vision.merge_every": "thesis Table 8.4's T; it must not follow the offline default",
    "lte.paper.vision.orth_heads": "the paper setting's Fig 4.7 heads; it must not follow the offline default",
    "bridge.paper.config.lr_new": "the paper setting's rate; it must not follow the offline default",
    "bridge.paper.config.lr_blocks": "the paper setting's rate; it must not follow the offline default",
    "bridge.paper.config.weight_decay": "the paper setting's decay; it must not follow the offline default",
}


def same(a, b) -> bool:
    """Equal values of the same types (1 is not 1.0 here: a float written where the default is an int would change
    the JSON a rule passes on), mappings in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def schema_view(cfg: dict) -> tuple[dict, dict, set]:
    """Validate ``cfg`` as ``prh.config.validate_schema`` does (filling defaults into it) and record, per mapping of
    ``cfg`` (by ``id``): the default of each key the validator would fill there, the keys it requires, and whether
    it is a name -> entry table (``additionalProperties`` with no ``properties``)."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    from prh.config import SCHEMA, _with_defaults, load_schema

    def retrieve(uri: str) -> Resource:
        contents = load_schema(SCHEMA.parent / uri)
        contents.pop("$schema", None)
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    schema = load_schema(SCHEMA)
    filling = _with_defaults(jsonschema.validators.validator_for(schema))
    fill, required_, additional = (filling.VALIDATORS[k] for k in ("properties", "required", "additionalProperties"))
    defaults: dict[int, dict] = {}
    required: dict[int, set] = {}
    tables: set[int] = set()

    def on_properties(validator, properties, instance, sub):
        if isinstance(instance, dict):
            for key, prop in properties.items():
                if isinstance(prop, dict) and "default" in prop:
                    defaults.setdefault(id(instance), {}).setdefault(key, copy.deepcopy(prop["default"]))
        yield from fill(validator, properties, instance, sub)

    def on_required(validator, keys, instance, sub):
        if isinstance(instance, dict):
            required.setdefault(id(instance), set()).update(keys)
        yield from required_(validator, keys, instance, sub)

    def on_additional(validator, extra, instance, sub):
        if isinstance(instance, dict) and isinstance(extra, dict) and "properties" not in sub:
            tables.add(id(instance))
        yield from additional(validator, extra, instance, sub)

    recording = jsonschema.validators.extend(filling, {"properties": on_properties, "required": on_required,
                                                       "additionalProperties": on_additional})
    list(recording(schema, registry=Registry(retrieve=retrieve)).iter_errors(cfg))
    return defaults, required, tables


_NONE = object()


def values_at_default(cfg: dict) -> list[tuple[str, str]]:
    """(dotted key, rule) of every value of ``cfg`` equal to its schema default; rule: "required", "column",
    "merged" (module docstring), "kept" (``KEPT``) or "default" (nothing keeps it). A mapping equal to its default
    is one value (its keys are not listed again)."""
    cfg = copy.deepcopy(cfg)
    nodes: list[tuple[tuple, dict, dict | None]] = []

    def walk(node, path, parent):
        if isinstance(node, dict):
            nodes.append((path, node, parent))
            for key, value in node.items():
                walk(value, path + (key,), node)

    walk(cfg, (), None)
    keys = {id(node): list(node) for _, node, _ in nodes}
    defaults, required, tables = schema_view(cfg)
    found = []
    for path, node, parent in nodes:
        for key in keys[id(node)]:
            default = defaults.get(id(node), {}).get(key, _NONE)
            if default is _NONE or not same(node[key], default) or (isinstance(default, dict) and not default):
                continue
            where = ".".join(map(str, path + (key,)))
            if any(where.startswith(f"{done}.") for done, _ in found):
                continue
            siblings = [s for s in (parent or {}).values() if isinstance(s, dict) and s is not node]
            if key in required.get(id(node), ()):
                rule = "required"
            elif id(parent) in tables and any(key in s and not same(s[key], default) for s in siblings):
                rule = "column"
            elif isinstance(default, dict) and not defaults.get(id(node[key])):
                rule = "merged"
            else:
                rule = "kept" if where in KEPT else "default"
            found.append((where, rule))
    return found


def test_no_value_of_params_yaml_repeats_its_default():
    from prh.config import load

    repeated = [key for key, rule in values_at_default(load(ROOT / "params.yaml")) if rule == "default"]
    assert not repeated, (f"{len(repeated)} values of params.yaml equal their schema default: remove them (the "
                          f"config check fills them in), or add each to KEPT with its reason: {', '.join(repeated)}")


def test_every_kept_value_is_still_a_default_in_params_yaml():
    """KEPT names values that are in params.yaml and equal to their default; one that moved or changed goes."""
    from prh.config import load

    kept = {key for key, rule in values_at_default(load(ROOT / "params.yaml")) if rule == "kept"}
    assert kept == set(KEPT), f"KEPT lists keys params.yaml no longer holds at their default: {set(KEPT) - kept}"


def test_blocks_left_empty_are_the_schema_defaults():
    """A block params.yaml leaves empty ({}) is the schema's defaults, as the workflow sees it."""
    from prh.checks import check_config
    from prh.config import load, schema_defaults

    raw = load(ROOT / "params.yaml")
    filled = check_config(copy.deepcopy(raw))
    empty = [block for block, value in raw.items() if value == {}]
    assert len(empty) >= 5  # world, features, transfer, ...
    for block in empty:
        assert filled[block] and filled[block] == schema_defaults(block), block
    assert filled["lte"]["vision"]["samples"] == schema_defaults("lte")["vision"]["samples"]  # a $ref'd block too


def test_a_layer_merged_into_a_kept_mapping_keeps_its_other_keys():
    """tests/smoke/params.yaml sets two keys of lte.vision.model: the others come from params.yaml's mapping (the
    schema's default of a mapping is not merged with a layer's part of it)."""
    from prh.checks import check_config
    from prh.config import load, merge

    smoke = check_config(merge(load(ROOT / "params.yaml"), load(ROOT / "tests" / "smoke" / "params.yaml")))
    assert smoke["lte"]["vision"]["model"] == {"patch": 8, "dim": 32, "depth": 1, "attn_heads": 2, "mlp_ratio": 2}


def test_the_rules_find_what_they_name():
    cfg = {"suite": "offline", "suites": {}, "datasets": {
        "a": {"kind": "hub", "repo": "o/a", "revision": "main", "split": "train", "image_column": "image", "seed": 0},
        "b": {"kind": "hub", "repo": "o/b", "revision": "main", "split": "test", "image_column": "image", "seed": 1}},
        "features": {"vision_batch_size": 64, "language_batch_size": 7}, "world": {"noise_std": 3}}
    found = dict(values_at_default(cfg))
    assert found["suite"] == "required" and found["datasets.a.split"] == "required"
    assert found["datasets.a.seed"] == "column"  # b's seed differs
    assert found["features.vision_batch_size"] == "default"
    assert "features.language_batch_size" not in found
    assert "world.noise_std" not in found  # 3 is not the default 3.0: the JSON a rule passes would change


if __name__ == "__main__":
    from prh.config import load

    for key, rule in values_at_default(load(sys.argv[1] if len(sys.argv) > 1 else ROOT / "params.yaml")):
        print(f"{rule:9} {key}" + (f"  ({KEPT[key]})" if rule == "kept" else ""))
