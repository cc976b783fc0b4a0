"""Loading and checking ``params.yaml`` (the Snakemake config and the DVC params).

Two layers of checking, both before any job runs:

1. ``validate_schema``: JSON-schema validation against
   ``workflow/schemas/params.schema.yaml`` (types, unknown keys, allowed values),
   filling in every default, also inside the blocks kept in sibling files
   (``$ref``), which Snakemake's own ``validate()`` checks but does not fill.
2. ``check_references`` and ``check_data_limits``: what a schema cannot say. Every name that refers to
   another entry (a suite's datasets and model sets, a model set's members)
   must exist; the message names the key, the bad value and the allowed values.

    prh check-config params.yaml
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import yaml

from prh.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "params.schema.yaml"


def load(path: str | Path = "params.yaml") -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path) as f:
        cfg = yaml.safe_load(f)
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
        with open(path) as f:
            layers.append((f"--configfile {path}", yaml.safe_load(f) or {}))
    if overrides:
        layers.append(("--config", dict(overrides)))
    return layers


@functools.lru_cache(maxsize=64)
def _schema_file(path: Path, mtime_ns: int, size: int) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_schema(path: str | Path) -> dict:
    """A schema file's content, parsed once per process (and again if the file changes).

    Every Snakemake start validates params.yaml; a ``$ref`` is retrieved each time the
    validator meets it, so uncached loads made up seconds of a no-op rerun (issue 18).
    Callers get a copy: validators and defaults must not edit the cached tree."""
    import copy

    path = Path(path).resolve()
    stat = path.stat()
    return copy.deepcopy(_schema_file(path, stat.st_mtime_ns, stat.st_size))


def validate_schema(cfg: dict, schema_path: str | Path = SCHEMA, *, layers: list[tuple[str, dict]] | None = None) -> dict:
    """Validate ``cfg`` against the JSON schema (with ``$ref`` to sibling files) and fill defaults.

    ``layers`` (from ``config_layers``) are the files and command-line values ``cfg`` was merged
    from; the error then names them all, and for each bad value the layer that set it.
    Default: ``cfg`` is params.yaml alone."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    schema_path = Path(schema_path)
    schema_dir = schema_path.parent

    def retrieve(uri: str) -> Resource:
        contents = load_schema(schema_dir / uri)
        # Without its $schema the referenced file is validated by our validator class,
        # which fills defaults; with it, jsonschema would switch to the plain class.
        contents.pop("$schema", None)
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    schema = load_schema(schema_path)
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = _with_defaults(validator_cls)(schema, registry=Registry(retrieve=retrieve))
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        layers = layers or [("params.yaml", cfg)]
        raise ConfigError(f"{_source_name(layers)} is invalid:\n" + "\n".join(
            _describe(e, _origin(e, layers)) + _from(_origin(e, layers), layers[0][0]) for e in errors))
    return cfg


def _source_name(layers: list[tuple[str, dict]]) -> str:
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
    return _defaults_of(root["properties"][block], schema_path.parent)


def entry_fields(schema_file: str, schema_dir: str | Path = SCHEMA.parent) -> dict[str, dict]:
    """The properties (description, type, default) of one entry of a map block, e.g. a model of
    ``zoo.vision`` (``entry_fields("zoo_vision.schema.yaml")``): for commands whose flags are those keys."""
    schema = load_schema(Path(schema_dir) / schema_file)
    return schema["additionalProperties"]["properties"]


def _defaults_of(schema: dict, schema_dir: Path):
    if "$ref" in schema:
        schema = {**load_schema(schema_dir / schema["$ref"]), **{k: v for k, v in schema.items()
                                                                                if k != "$ref"}}
    if schema.get("type") == "object" and "properties" in schema:
        filled = {key: _defaults_of(sub, schema_dir) for key, sub in schema["properties"].items()}
        return {key: value for key, value in filled.items() if value is not _NO_DEFAULT}
    return schema.get("default", _NO_DEFAULT)


_NO_DEFAULT = object()


def _describe(err, origin: str | None = None) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"  {where}: {err.message}; allowed keys: {', '.join(allowed)}"
    if err.validator == "enum":
        return f"  {where}: {err.instance!r} is not allowed; choose one of {err.validator_value}"
    wanted = set(err.validator_value if isinstance(err.validator_value, list) else [err.validator_value])
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

    return __import__("jsonschema").validators.extend(validator_cls, {"properties": set_defaults})


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


def all_datasets(cfg: dict) -> dict[str, dict]:
    """Every dataset the config defines, by name."""
    return dict(cfg.get("datasets") or {})


def check_references(cfg: dict) -> dict:
    """Raise ``ConfigError`` when a name refers to a dataset, model or model set that does not exist."""
    problems: list[str] = []
    models = all_models(cfg)
    datasets = all_datasets(cfg)
    sets = cfg.get("model_sets") or {}

    for set_name, members in sets.items():
        for m in members:
            if m not in models:
                problems.append(
                    f"  model_sets.{set_name}: unknown model {m!r}; defined models: {', '.join(sorted(models))}"
                )
    for suite_name, suite in (cfg.get("suites") or {}).items():
        for key, value in suite.items():
            if key.endswith("_models") and value not in sets:
                problems.append(
                    f"  suites.{suite_name}.{key}: unknown model set {value!r}; "
                    f"choose one of: {', '.join(sorted(sets))}"
                )
            if key.endswith("_dataset") and value not in datasets:
                problems.append(
                    f"  suites.{suite_name}.{key}: unknown dataset {value!r}; "
                    f"choose one of: {', '.join(sorted(datasets))}"
                )
    problems += _carve_problems(datasets)
    for task in ((cfg.get("convergence") or {}).get("vtab_tasks") or []):
        absent = [f"vtab_{task}_{part}" for part in ("train", "test") if f"vtab_{task}_{part}" not in datasets]
        if absent:
            known = sorted(n[len("vtab_"):-len("_train")] for n in datasets if n.startswith("vtab_") and n.endswith("_train"))
            problems.append(f"  convergence.vtab_tasks: task {task!r} has no dataset {' or '.join(absent)}; "
                            f"choose among: {', '.join(known)}")
    suite = cfg.get("suite")
    if suite is not None and suite not in (cfg.get("suites") or {}):
        problems.append(f"  suite: unknown suite {suite!r}; choose one of: {', '.join(cfg.get('suites') or {})}")
    if problems:
        raise ConfigError("params.yaml refers to names that do not exist:\n" + "\n".join(problems))
    return cfg


def vtab_tasks(cfg: dict) -> dict[str, tuple[str, str]]:
    """VTAB task -> (train, test) dataset names of Fig 2's probes: ``convergence.vtab_tasks`` when it lists
    tasks, else every ``vtab_<task>_train`` dataset with its ``_test``, in params order."""
    names = (cfg.get("convergence") or {}).get("vtab_tasks")
    if names is None:
        names = [n[len("vtab_"):-len("_train")] for n in cfg.get("datasets") or {}
                 if n.startswith("vtab_") and n.endswith("_train")]
    return {t: (f"vtab_{t}_train", f"vtab_{t}_test") for t in names}


def _carve_problems(datasets: dict) -> list[str]:
    """Datasets carved from one source split (same repo, revision, config, data_files and ``carve.from``)
    get disjoint rows only when they share ``carve`` (parts and seed) and each takes one of its parts."""
    groups: dict[str, list[tuple[str, dict]]] = {}
    for name, spec in datasets.items():
        carve = (spec or {}).get("carve")
        if carve:
            key = repr((spec.get("repo"), spec.get("revision"), spec.get("config"), spec.get("data_files"), carve.get("from")))
            groups.setdefault(key, []).append((name, spec))
    problems = []
    for members in groups.values():
        names = ", ".join(n for n, _ in members)
        if len({repr(sorted(s["carve"].items())) for _, s in members}) > 1:
            problems.append(f"  datasets {names}: carved from the same split with different `carve` (parts or seed), "
                            "so their rows could overlap; give them the same carve")
        for name, spec in members:
            if spec.get("split") not in (spec["carve"].get("parts") or {}):
                problems.append(f"  datasets.{name}.split: {spec.get('split')!r} is not one of its carve parts "
                                f"{sorted(spec['carve'].get('parts') or {})}")
    return problems


def check_data_limits(cfg: dict) -> dict:
    """Raise ``ConfigError`` for settings that only the data's size or a model's modality rules out,
    before any job (otherwise they fail inside jobs, after training and extraction): k of the k-NN
    metrics against the datasets' item counts (CKNNA, one of the eight metrics of Figs 12-14, needs
    k >= 2), Fig 10's ks and Fig 12's batch sizes against them, and each suite's vision and language
    model sets holding models of that modality. Hub datasets without an ``n`` cap are not checked."""
    problems: list[str] = []
    name = cfg.get("suite")
    suite = (cfg.get("suites") or {}).get(name) or {}
    datasets, models, sets = cfg.get("datasets") or {}, all_models(cfg), cfg.get("model_sets") or {}
    sizes = {key: (suite[key], (datasets.get(suite[key]) or {}).get("n")) for key in ("vision_dataset", "paired_dataset")
             if key in suite}
    topk = (cfg.get("alignment") or {}).get("topk", 10)
    if topk < 2:
        problems.append(f"  alignment.topk: {topk}; CKNNA (one of the metrics of Figs 12-14) needs k >= 2")
    for key, (ds, n) in sizes.items():
        if n is not None and topk >= n:
            problems.append(f"  alignment.topk: {topk} must be below the {n} items of {ds} (suites.{name}.{key})")
    agree = cfg.get("metrics_agreement") or {}
    ds, n = sizes.get("paired_dataset", (None, None))
    for k in agree.get("locality_ks", []):
        if n is not None and k not in ("N-1", -1) and not 2 <= int(k) <= n - 1:
            problems.append(f"  metrics_agreement.locality_ks: {k} must be in [2, {n - 1}] (N - 1 of {ds}), or 'N-1'")
    ds, n = sizes.get("vision_dataset", (None, None))
    for b in agree.get("batch_sizes", []):
        if n is not None and b > n:
            problems.append(f"  metrics_agreement.batch_sizes: {b} is more than the {n} items of {ds}")
    for modality in ("vision", "language"):
        set_name = suite.get(f"{modality}_models")
        wrong = [m for m in sets.get(set_name, []) if models.get(m, {}).get("modality") not in (modality, None)]
        if wrong:
            problems.append(f"  suites.{name}.{modality}_models: set {set_name!r} holds models that are not "
                            f"{modality} models: {', '.join(wrong)}")
    if problems:
        raise ConfigError("params.yaml asks for what the data cannot give:\n" + "\n".join(problems))
    return cfg


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


def load_checked(path: str | Path = "params.yaml") -> dict:
    """Load, validate and check a config: what the Snakefile does, for use outside Snakemake."""
    cfg = load(path)
    return check_data_limits(check_references(validate_schema(cfg, layers=[(str(path), cfg)])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh check-config", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="params.yaml")
    args = parser.parse_args(argv)
    try:
        load_checked(args.config)
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    print(f"{args.config}: ok")
