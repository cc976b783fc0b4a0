"""Loading and checking ``params.yaml`` (the Snakemake config and the DVC params).

Two layers of checking, both before any job runs:

1. ``validate_schema``: JSON-schema validation against
   ``workflow/schemas/params.schema.yaml`` (types, unknown keys, allowed values),
   filling in every default, also inside the blocks kept in sibling files
   (``$ref``), which Snakemake's own ``validate()`` checks but does not fill.
``prh.checks`` adds what a schema cannot say: references (every name that refers to another entry
must exist) and the limits only the data rules out, and runs all three in one pass (``prh
check-config``, and the Snakefile before any job).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from prh.errors import ConfigError, problems_message
from prh.yamlfile import safe_load

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "params.schema.yaml"


def load(path: str | Path = "params.yaml", *, empty_ok: bool = False) -> dict:
    """A YAML config file as a mapping; broken YAML is a ``ConfigError`` naming the file, line and column."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; give a YAML file (params.yaml, presets/<name>.yaml)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8 "
                          "(a UTF-16 file starts with the bytes FF FE or FE FF)") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e}); check its permissions") from None
    try:
        cfg = safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        if isinstance(e, yaml.constructor.ConstructorError):  # a key twice, an alias bomb (prh.yamlfile)
            raise ConfigError(f"{where}: {what}") from None
        raise ConfigError(f"{where}: not valid YAML ({what}); fix the file there (a tab for indentation, an "
                          "unclosed bracket or quote, or a missing space after ':' are the usual causes)") from None
    if cfg is None and empty_ok:
        return {}
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return cfg


def config_layers(*, base: str | Path = "params.yaml", configfiles=(), overrides=None) -> list[tuple[str, dict]]:
    """The layers of a Snakemake config, lowest precedence first, each as (where it came from, its
    values): ``base`` (the Snakefile's ``configfile:``), every ``--configfile`` (Snakemake's
    ``workflow.config_settings.configfiles``) and the ``--config`` values (``...config_settings.config``).
    ``validate_schema(cfg, layers=...)`` then names the merged configuration and where each bad value came from."""
    layers = [(str(base), load(base))]
    for path in configfiles or ():
        layers.append((f"--configfile {path}", load(path, empty_ok=True)))
    if overrides:
        layers.append(("--config", dict(overrides)))
    return layers


@functools.lru_cache(maxsize=64)
def _schema_file(path: Path, mtime_ns: int, size: int) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_schema(path: str | Path) -> dict:
    """A schema file's content, parsed once per process (and again if the file changes).

    Every Snakemake start validates params.yaml; a ``$ref`` is retrieved each time the
    validator meets it, so uncached loads made up seconds of a no-op rerun.
    Callers get a copy: validators and defaults must not edit the cached tree."""
    import copy

    path = Path(path).resolve()
    stat = path.stat()
    return copy.deepcopy(_schema_file(path, stat.st_mtime_ns, stat.st_size))


def schema_validator(schema_path: str | Path = SCHEMA, *, fill_defaults: bool = True):
    """A validator of the config schema, its ``$ref`` to sibling files resolved; with ``fill_defaults`` it writes each
    default into the config it checks (``validate_schema``), without it it only checks (``prh.slices``)."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    schema_dir = Path(schema_path).parent

    def retrieve(uri: str) -> Resource:
        contents = load_schema(schema_dir / uri)
        # Without its $schema the referenced file is validated by our validator class,
        # which fills defaults; with it, jsonschema would switch to the plain class.
        contents.pop("$schema", None)
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    schema = load_schema(schema_path)
    validator_cls = jsonschema.validators.validator_for(schema)
    cls = _with_defaults(validator_cls) if fill_defaults else validator_cls
    return cls(schema, registry=Registry(retrieve=retrieve))


def validate_schema(cfg: dict, schema_path: str | Path = SCHEMA, *, layers: list[tuple[str, dict]] | None = None) -> dict:
    """Validate ``cfg`` against the JSON schema (with ``$ref`` to sibling files) and fill defaults.

    ``layers`` (from ``config_layers``) are the files and command-line values ``cfg`` was merged
    from; the error then names them all, and for each bad value the layer that set it.
    Default: ``cfg`` is params.yaml alone."""
    validator = schema_validator(schema_path)
    errors, seen = [], set()
    found = sorted(validator.iter_errors(cfg), key=lambda e: (list(map(str, e.absolute_path)), e.validator != "type"))
    # an entry that lacks a required key fails its other rules too (defaults missing): report the missing key
    incomplete = [tuple(e.absolute_path) for e in found if e.validator == "required"]
    # one problem per key: a value of the wrong type also fails its enum or minimum; the type is the one to fix
    for e in found:
        path = tuple(e.absolute_path)
        if path in seen or (e.validator != "required" and any(path[:len(q)] == q and len(path) > len(q)
                                                                for q in incomplete)):
            continue
        seen.add(path)
        errors.append(e)
    if errors:
        layers = layers or [("params.yaml", cfg)]
        raise ConfigError(problems_message(f"{source_name(layers)} is invalid", [
            _describe(e, _origin(e, layers)) + _from(_origin(e, layers), layers[0][0]) for e in errors]))
    return cfg


def source_name(layers: list[tuple[str, dict]]) -> str:
    """How an error names the config: the one file, or the merged layers."""
    if len(layers) == 1:
        return layers[0][0]
    names = [name if name != "--config" else "--config " + " ".join(f"{k}={v!r}" for k, v in values.items())
             for name, values in layers]
    return f"the merged configuration ({' + '.join(names)})"


_UNSET = object()


def _lookup(values, path: list):
    for key in path:
        if not isinstance(values, dict) or key not in values:
            return _UNSET
        values = values[key]
    return values


def _origin(err, layers: list[tuple[str, dict]]) -> str | None:
    """None when the bad value is params.yaml's own; else the --configfile or --config layer that set it."""
    if len(layers) == 1:
        return None
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        extra = [k for k in err.instance if k not in err.schema.get("properties", {})]
        path = path + extra[:1]
    base = _lookup(layers[0][1], path)
    for name, values in reversed(layers[1:]):
        value = _lookup(values, path)
        if value is not _UNSET and value != base:
            return name
    return None


def where_set(path: list, layers: list[tuple[str, dict]]) -> str:
    """`` (this value comes from <layer>, not from <base>)`` when a layer above the base set the value at ``path``
    (a list of keys), else "" (the base's own value)."""
    if len(layers) < 2:
        return ""
    base = _lookup(layers[0][1], path)
    for name, values in reversed(layers[1:]):
        value = _lookup(values, path)
        if value is not _UNSET and value != base:
            return _from(name, layers[0][0])
    return ""


def _from(origin: str | None, base: str) -> str:
    if origin is None:
        return ""
    where = "the command line (--config)" if origin == "--config" else origin
    return f" (this value comes from {where}, not from {base})"


def schema_defaults(block: str, schema_path: str | Path = SCHEMA) -> dict:
    """The defaults of one top-level block of params.yaml (e.g. ``"transfer"``), from the schema.

    The schema is the one home of every default: library code that accepts a partial
    block fills it from here instead of keeping its own copy.
    """
    schema_path = Path(schema_path)
    root = load_schema(schema_path)
    if block not in root.get("properties", {}):
        raise ValueError(f"params.yaml has no block {block!r}; blocks: {', '.join(root['properties'])}")
    return _defaults_of(root["properties"][block], schema_path.parent, root)


def entry_fields(schema_file: str, schema_dir: str | Path = SCHEMA.parent) -> dict[str, dict]:
    """The properties (description, type, default) of one entry of a map block, e.g. a model of
    ``zoo.vision`` (``entry_fields("zoo_vision.schema.yaml")``): for commands whose flags are those keys."""
    schema = load_schema(Path(schema_dir) / schema_file)
    return schema["additionalProperties"]["properties"]


def resolve_ref(schema: dict, root: dict, schema_dir: Path = SCHEMA.parent) -> tuple[dict, dict]:
    """``schema`` with its ``$ref`` followed (a sibling file, or "#/$defs/..." inside ``root``, the file it sits in),
    and the file the result sits in."""
    ref = schema.get("$ref")
    if not ref:
        return schema, root
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    if ref.startswith("#/"):
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
    else:
        target = root = load_schema(Path(schema_dir) / ref)
    return {**target, **rest}, root


def _defaults_of(schema: dict, schema_dir: Path, root: dict):
    """The defaults under ``schema``; ``root`` is the file it sits in (for "#/$defs/..." references)."""
    schema, root = resolve_ref(schema, root, schema_dir)
    if schema.get("type") == "object" and "properties" in schema:
        filled = {key: _defaults_of(sub, schema_dir, root) for key, sub in schema["properties"].items()}
        return {key: value for key, value in filled.items() if value is not _NO_DEFAULT}
    return schema.get("default", _NO_DEFAULT)


_NO_DEFAULT = object()


def _describe(err, origin: str | None = None) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"  {where}: {err.message}; allowed keys: {', '.join(allowed)}"
    if err.validator == "pattern" and isinstance(err.instance, str):
        return (f"  {where}: {err.instance!r} is not a valid name: use letters, digits and . _ - only, starting with a "
                "letter or digit, at most 100 characters (names become folder names and shell arguments)")
    if err.validator == "uniqueItems" and isinstance(err.instance, list):
        twice = sorted({repr(v) for i, v in enumerate(err.instance) if v in err.instance[:i]})
        return (f"  {where}: lists {', '.join(twice)} more than once; give each entry once (a model listed twice is "
                "compared with itself, a score of 1.0 that inflates every mean)")
    if err.validator == "type" and wanted_bool(err) and isinstance(err.instance, str) \
            and err.instance.lower() in ("true", "false", "yes", "no", "on", "off"):
        return (f"  {where}: {err.message}. On the command line write {err.instance.lower() in ('true', 'yes', 'on')}"
                f" (capitalised, as Snakemake's --config reads Python literals): --config {where}="
                f"{err.instance.lower() in ('true', 'yes', 'on')}")
    if err.validator == "enum":
        return f"  {where}: {err.instance!r} is not allowed; choose one of {err.validator_value}"
    values = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
    wanted = {v for v in values if isinstance(v, str)}  # type names (anyOf/oneOf give schemas: not these)
    text = err.instance if err.validator == "type" and isinstance(err.instance, str) else None
    nested_hint = ("put nested values in a YAML file and pass it with `--configfile FILE` (Snakemake's --config "
                   "reads a nested value as a string, or a mapping of strings, and rejects `--config a.b=1`)")
    if err.validator == "type" and "object" in wanted and (text is not None or origin == "--config"):
        return f"  {where}: {err.message}. A nested value given with --config arrives as a string: {nested_hint}"
    if text is not None and wanted & {"number", "integer"} and origin == "--config" and len(err.absolute_path) > 1:
        return f"  {where}: {err.message}. A value nested in --config arrives as a string: {nested_hint}"
    if text is not None and wanted & {"number", "integer"} and "e" in text.lower():
        try:
            float(text)
        except ValueError:
            pass
        else:
            return (f"  {where}: {err.message}. YAML 1.1 (PyYAML) reads {text} as a string, not a "
                    f"number: write it with a dot and a signed exponent ({_yaml11_float(text)}) or as a "
                    f"decimal ({float(text)!r})")
    return f"  {where}: {err.message}"


def wanted_bool(err) -> bool:
    """A ``type`` error whose schema wants a boolean."""
    want = err.validator_value
    return "boolean" in (want if isinstance(want, list) else [want])


def _yaml11_float(text: str) -> str:
    """``3e-3`` as YAML 1.1 reads a float: ``3.0e-3`` (a dot in the mantissa, a sign in the exponent)."""
    mantissa, exponent = f"{float(text):.1e}".split("e")
    return f"{mantissa}e{int(exponent):+d}"if int(exponent) else mantissa


def _with_defaults(validator_cls):
    """A validator that also fills ``default`` values into the instance (as Snakemake does)."""
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    # "integer" means an int: jsonschema also takes a float with no fraction (1.2e29, 1e20), which then overflows
    # torch's seeds or numpy's counts
    checker = validator_cls.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    return __import__("jsonschema").validators.extend(validator_cls, {"properties": set_defaults},
                                                     type_checker=checker)


def all_models(cfg: dict) -> dict[str, dict]:
    """Every model the config defines, by name: the offline zoo and the paper suite's hub models."""
    models: dict[str, dict] = {}
    for family in ("vision", "language"):
        for name, spec in (cfg.get("zoo", {}).get(family) or {}).items():
            models.update(run_models(name, {"source": "zoo", "modality": family, **spec}))
    for name, spec in (cfg.get("paper", {}).get("models") or {}).items():
        models[name] = {"source": "hub", **spec}
    return models


def run_models(run: str, spec: dict) -> dict[str, dict]:
    """The models one zoo entry yields: itself, or with ``checkpoints: [k, ...]`` one model per
    checkpoint, named ``<run>_<k>``, each with ``steps: k`` and ``run: <run>`` (the job that trains it)."""
    if not spec.get("checkpoints"):
        return {run: {**spec, "run": run}}
    return {f"{run}_{k}": {**spec, "steps": k, "run": run} for k in spec["checkpoints"]}


def language_runs(cfg: dict) -> dict[str, dict]:
    """The zoo's language training runs with checkpoints, as the amended language test's units:
    {run: {"final": <run>_<last step>, "untrained": the step-0 model of its family, "seed"}}; a run whose
    family has no step-0 model is left out."""
    runs = (cfg.get("zoo") or {}).get("language") or {}
    untrained = {spec.get("family"): f"{run}_0" for run, spec in runs.items() if 0 in (spec.get("checkpoints") or [])}
    out = {}
    for run, spec in runs.items():
        steps = [k for k in spec.get("checkpoints") or [] if k > 0]
        if steps and spec.get("family") in untrained:
            out[run] = {"final": f"{run}_{max(steps)}", "untrained": untrained[spec["family"]], "seed": spec.get("seed", 0)}
    return out


def replicate_config(cfg: dict, seed: int) -> dict:
    """The config of one replicate of the DAG (``claims.replicates``): the same analysis under master
    ``seed``, its results under ``results/replicates/seed<seed>``, with no replicates of its own. Every training
    run reads the master seed (a zoo run or bridge arm adds its own seed to it), so a replicate trains every
    model, arm and LTE head again from independent draws; datasets keep their own seeds (same data)."""
    import copy

    if cfg.get("results", "results") != "results":
        raise ValueError(f"a replicate's config is made from the run's, whose results root is 'results', "
                         f"not {cfg.get('results')!r}")
    out = copy.deepcopy(cfg)
    out.update(seed=int(seed), results=f"results/replicates/seed{int(seed)}")
    out["claims"] = {**(cfg.get("claims") or {}), "replicates": []}
    return out


def all_datasets(cfg: dict) -> dict[str, dict]:
    """Every dataset the config defines, by name."""
    return dict(cfg.get("datasets") or {})


# The keys of the `features` block each extraction command reads (its rules' one --config argument, prh.slices); here,
# not in prh.extract, because the workflow reads them while it parses and prh.extract imports torch
EXTRACT_CONFIG = {
    "vision": {"features": ("vision_batch_size", "vision_dtype", "gpu_memory_budget_gb")},
    "language": {"features": ("language_batch_size", "language_pooling", "prompt_template", "max_batch_tokens",
                              "gpu_memory_budget_gb")},
}


def vtab_tasks(cfg: dict) -> dict[str, tuple[str, str]]:
    """VTAB task -> (train, test) dataset names of Fig 2's probes: ``convergence.vtab_tasks`` when it lists
    tasks, else every ``vtab_<task>_train`` dataset with its ``_test``, in params order."""
    names = (cfg.get("convergence") or {}).get("vtab_tasks")
    if names is None:
        names = [n[len("vtab_"):-len("_train")] for n in cfg.get("datasets") or {}
                 if n.startswith("vtab_") and n.endswith("_train")]
    return {t: (f"vtab_{t}_train", f"vtab_{t}_test") for t in names}


def merge(base: dict, override: dict) -> dict:
    """``base`` updated by ``override`` as Snakemake layers a ``--configfile``: nested
    mappings merge key by key; lists and plain values replace. Neither input is changed."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
