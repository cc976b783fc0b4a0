"""The one config check before any job: schema, names that refer to something, and limits only the data rules out.

The schema checks each value alone; ``check_references`` checks that every name refers to an entry that exists
(a suite's datasets and model sets, a set's members, the names ``REFERENCES`` lists, ``alignment.metric`` among
the metric table's), with close matches. Left are settings that are valid on their own but impossible (or
silently wrong) together, which used to fail inside a job, some after the most expensive work:

- k of the k-NN metrics against the items they run on: ``alignment.topk`` (and ``convergence.topk``)
  at most N - 2 of each suite dataset (at k = N - 1 every other item is a neighbour, so mutual k-NN is
  1.0 for any two models), at least 2 (CKNNA); the bridge's ``config.topk`` against its ``n_probe``;
- Fig 10's ks and Fig 12's ``batch_sizes`` (each below N, above k + 1) against the paired and vision sets;
- Fig 2's competence ``bins`` against the number of probe tasks (every count 0..n_tasks in one bin);
- each zoo run's ``checkpoints`` within its ``steps``;
- the suite's vision and language model sets holding models of that modality;
- ``device: cuda`` on a machine without a GPU, when jobs run here (``check_device``, from ``onstart:``).

Each problem names its key and the layer that set it (params.yaml, a ``--configfile``, ``--config``).
Hub datasets without an ``n`` cap are not checked (their size is known only after the download).
``check_config`` is the one pass the Snakefile and ``prh check-config`` run: schema (types, ranges, name
patterns, unique lists; defaults filled), references (names that exist), then these limits. ``make pull``'s check
of ``dvc.lock`` is ``prh.lock``.

    prh check-config                                        # params.yaml
    prh check-config --configfile presets/replay.yaml --config suite=paper
"""

from __future__ import annotations

import argparse

from prh.config import (all_datasets, all_models, config_layers, merge, source_name, validate_schema, vtab_tasks,
                        where_set)
from prh.errors import ConfigError, did_you_mean, problems_message
from prh.metrics.names import SUPPORTED_METRICS

__all__ = ["check_config", "check_references", "check_limits", "check_bins", "check_device", "n_probe_tasks",
           "main", "REFERENCES", "REFERENCE_LITERALS"]


# names that refer to a dataset, a model set, a model or a metric ("*": every key at that level; a model set's
# members too)
REFERENCES = {**{f"suites.*.{key}": "dataset" for key in ("paired_dataset", "vision_dataset", "density_dataset")},
              **{f"suites.*.{key}": "model set" for key in ("vision_models", "language_models", "language_panel")},
              "bridge.*.train_data": "dataset", "bridge.*.probe_data": "dataset", "phase.paired_dataset.*": "dataset",
              "lte.dataset": "dataset", "convergence.vision_models.*": "model set", "phase.vision_models.*": "model set",
              "phase.language_models.*": "model set", "downstream.language_models.*": "model set",
              "downstream.vision_models.*": "model set", "convergence.preregistered.vision_models": "model set",
              "convergence.relational.model_set": "model set",
              "bridge.*.strongest_vision": "model", "color.images.*": "dataset", "sample_size.dataset.*": "dataset",
              "sample_size.vision_models.*": "model", "sample_size.language_models.*": "model",
              "lte.paper.datasets": "dataset", "downstream.strongest_vision": "model",
              "density.captioner": "model", "zoo.vision.*.data": "dataset", "zoo.language.*.data": "dataset",
              "alignment.metric": "metric"}
# values a referring key may hold besides a name (color.images: the photos packaged with scikit-image and -learn)
REFERENCE_LITERALS = {"color.images": ("packaged",)}


def _named_references(cfg: dict):
    """(dotted key, value, kind) of every name ``REFERENCES`` lists that ``cfg`` sets (a string, or a list of them)."""
    def walk(node, parts, done):
        if not parts:
            for value in node if isinstance(node, list) else [node]:
                if isinstance(value, str):
                    yield ".".join(done), value
            return
        head, rest = parts[0], parts[1:]
        if not isinstance(node, dict):
            return
        for key in (node if head == "*" else [head] if head in node else []):
            yield from walk(node[key], rest, done + [str(key)])

    for pattern, kind in REFERENCES.items():
        for key, value in walk(cfg, pattern.split("."), []):
            yield key, value, kind


def check_references(cfg: dict, *, layers: list[tuple[str, dict]] | None = None) -> dict:
    """Raise ``ConfigError`` when a name refers to a dataset, model or model set that does not exist (named as
    ``check_limits`` names the config: ``layers`` from ``config_layers``, default params.yaml alone)."""
    problems: list[str] = []
    models = all_models(cfg)
    datasets = all_datasets(cfg)
    sets = cfg.get("model_sets") or {}

    # kind -> name -> the keys naming it; one line per kind for all its unknown names (a removed entry breaks many)
    unknown: dict[str, dict[str, list[str]]] = {"model": {}, "model set": {}, "dataset": {}, "metric": {}}
    pools = {"model": models, "model set": sets, "dataset": datasets, "metric": SUPPORTED_METRICS}

    def refer(key, value, kind):
        if value is not None and value not in pools[kind] and value not in REFERENCE_LITERALS.get(key.rsplit(".", 1)[0], ()):
            unknown[kind].setdefault(value, []).append(key)

    for set_name, members in sets.items():
        for m in members:
            refer(f"model_sets.{set_name}", m, "model")
    for key, value, kind in _named_references(cfg):
        refer(key, value, kind)
    # color.language_models: per suite, a model-set name or a list of model names
    for suite, value in ((cfg.get("color") or {}).get("language_models") or {}).items():
        for m in value if isinstance(value, list) else [value]:
            refer(f"color.language_models.{suite}", m, "model" if isinstance(value, list) else "model set")
    for kind, names in unknown.items():
        if len(names) == 1:
            (name, where), = names.items()
            problems.append(f"  {', '.join(where)}: {did_you_mean(name, pools[kind], kind=kind)}")
        elif names:
            where = sorted({w for ws in names.values() for w in ws})
            problems.append(f"  {', '.join(where)}: unknown {kind}s {', '.join(map(repr, names))} (none is defined: "
                            f"was an entry removed?)")
    problems += _carve_problems(datasets)
    problems += _checkpoint_declaration_problems(cfg)
    for task in ((cfg.get("convergence") or {}).get("vtab_tasks") or []):
        absent = [f"vtab_{task}_{part}" for part in ("train", "test") if f"vtab_{task}_{part}" not in datasets]
        if absent:
            known = sorted(n[len("vtab_"):-len("_train")] for n in datasets if n.startswith("vtab_") and n.endswith("_train"))
            problems.append(f"  convergence.vtab_tasks: task {task!r} has no dataset {' or '.join(absent)}; "
                            f"choose among: {', '.join(known)}")
    suite = cfg.get("suite")
    if suite is not None and suite not in (cfg.get("suites") or {}):
        problems.append(f"  suite: unknown suite {suite!r}; " + (
            f"choose one of: {', '.join(cfg['suites'])}" if cfg.get("suites") else
            "the config defines no suites at all: is it an override file? Layer it on params.yaml "
            "(`prh check-config --configfile FILE`, `snakemake --configfile FILE`)"))
    if problems:
        raise ConfigError(problems_message(f"{source_name(layers or [('params.yaml', cfg)])} refers to names that do "
                                           "not exist", problems))
    return cfg


def _checkpoint_declaration_problems(cfg: dict) -> list[str]:
    """A ``paper.models`` entry of source url or random whose declaration (``paper.checkpoints.file``) is missing or
    does not fit (``prh.models.checkpoints.resolve_checkpoint``): one line per distinct problem."""
    from prh.models.checkpoints import checkpoint_models, resolve_checkpoint

    found = []
    for name in checkpoint_models(cfg):
        try:
            resolve_checkpoint(cfg, name)
        except ConfigError as e:
            found.append(f"  {e}")
    return list(dict.fromkeys(found))


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


def check_bins(*, bins: list[int], n_tasks: int) -> list[int]:
    """``bins`` when each count 0..n_tasks of solved tasks falls in exactly one bin [bins[i], bins[i+1]):
    increasing edges with bins[0] <= 0 and bins[-1] > n_tasks. params.yaml: one list per suite (bins.<suite>)."""
    if isinstance(bins, dict):
        raise ValueError(f"bins={bins} is per suite: pass one suite's list of edges, e.g. bins['paper']")
    if len(bins) < 2 or any(b >= c for b, c in zip(bins, bins[1:])) or bins[0] > 0 or bins[-1] <= n_tasks:
        raise ValueError(f"bins {bins} leave counts of solved tasks outside every bin: with {n_tasks} tasks the "
                         f"edges must increase from 0 to >= {n_tasks + 1}, e.g. [0, ..., {n_tasks + 1}]")
    return list(bins)


def n_probe_tasks(cfg: dict) -> int:
    """Tasks Fig 2 counts as solved: the shapes world's (offline) or the VTAB tasks of ``convergence.vtab_tasks``."""
    if cfg.get("suite") == "offline":
        from prh.data.tasks import TASKS

        return len(TASKS)
    return len(vtab_tasks(cfg))


def _sizes(cfg: dict) -> dict[str, tuple[str, int | None]]:
    """suites.<suite>.<key> -> (dataset, its n cap or None) for the suite's vision and paired datasets."""
    suite = (cfg.get("suites") or {}).get(cfg.get("suite")) or {}
    datasets = cfg.get("datasets") or {}
    return {key: (suite[key], (datasets.get(suite[key]) or {}).get("n")) for key in ("vision_dataset", "paired_dataset")
            if key in suite}


def _knn_problems(cfg: dict, name: str) -> list[tuple[str, str]]:
    out = []
    sizes = _sizes(cfg)
    for key in ("alignment.topk", "convergence.topk"):
        block, field = key.split(".")
        k = (cfg.get(block) or {}).get(field)
        if k is None:
            continue
        if key == "alignment.topk" and k < 2:
            out.append((key, f"{k}; CKNNA (one of the metrics of Figs 12-14) needs k >= 2"))
        for skey, (ds, n) in sizes.items():
            if n is not None and k > n - 2:
                out.append((key, f"{k} must be at most N - 2 = {n - 2} for the {n} items of {ds} (suites.{name}.{skey}):"
                                 " at k = N - 1 every other item is a neighbour and mutual k-NN is 1.0 for any two models"))
    agree = cfg.get("metric_agreement") or {}
    topk = (cfg.get("alignment") or {}).get("topk", 10)
    ds, n = sizes.get("paired_dataset", (None, None))
    for k in agree.get("locality_ks", []):
        if n is not None and k not in ("N-1", -1) and not 2 <= int(k) <= n - 1:
            out.append(("metric_agreement.locality_ks", f"{k} must be in [2, {n - 1}] (N - 1 of {ds}), or 'N-1'"))
    ds, n = sizes.get("vision_dataset", (None, None))
    for b in agree.get("batch_sizes", []):
        if n is not None and b >= n:
            out.append(("metric_agreement.batch_sizes", f"{b} must be below the {n} items of {ds} (a batch of all N "
                                                         "items is the full-set score Fig 12 compares against)"))
        if b < topk + 2 and not any(key == "alignment.topk" for key, _ in out):  # a bad topk is the one cause
            out.append(("metric_agreement.batch_sizes", f"{b} must be at least alignment.topk + 2 = {topk + 2} "
                                                         "(k-NN within a batch needs k + 1 other items)"))
    bridge = ((cfg.get("bridge") or {}).get(name) or {}).get("config") or {}
    if "topk" in bridge and "n_probe" in bridge and bridge["topk"] > bridge["n_probe"] - 2:
        out.append((f"bridge.{name}.config.topk", f"{bridge['topk']} must be at most n_probe - 2 = "
                                                  f"{bridge['n_probe'] - 2} (bridge.{name}.config.n_probe: "
                                                  f"{bridge['n_probe']} items); checked after every arm trains otherwise"))
    return out


def _other_problems(cfg: dict, name: str) -> list[tuple[str, str]]:
    out = []
    bins = ((cfg.get("convergence") or {}).get("bins") or {}).get(name)
    if bins is not None:
        try:
            check_bins(bins=bins, n_tasks=n_probe_tasks(cfg))
        except ValueError as e:
            out.append((f"convergence.bins.{name}", str(e)))
    out += _checkpoint_problems(cfg)
    suite = (cfg.get("suites") or {}).get(name) or {}
    models, sets = all_models(cfg), cfg.get("model_sets") or {}
    for modality in ("vision", "language"):
        set_name = suite.get(f"{modality}_models")
        wrong = [m for m in sets.get(set_name, []) if models.get(m, {}).get("modality") not in (modality, None)]
        if wrong:
            out.append((f"suites.{name}.{modality}_models", f"set {set_name!r} holds models that are not {modality} "
                                                            f"models: {', '.join(wrong)}"))
    out += _replicate_problems(cfg)
    return out


def _own_seeds(cfg: dict) -> list[int]:
    """The seeds training runs add to the master seed: zoo runs' and bridge arms' (named and swept)."""
    own = [spec.get("seed", 0) for runs in (cfg.get("zoo") or {}).values() for spec in (runs or {}).values()
           if isinstance(spec, dict)]
    for block in ((cfg.get("bridge") or {}).get(s) or {} for s in ("offline", "paper")):
        own += [arm.get("seed", 0) for arm in (block.get("arms") or {}).values() if isinstance(arm, dict)]
        own += [x for sweep in block.get("sweeps") or [] for x in sweep.get("seed", [])]
    return [int(x) for x in own if isinstance(x, int)]


def _replicate_problems(cfg: dict) -> list[tuple[str, str]]:
    """Replicates that would train a run of another seed again (a zoo run or bridge arm trains with master +
    its own seed): each master seed must lie more than the largest own seed (and at least 100) from the
    run's ``seed`` and from every other replicate; and replicates live under the default results root."""
    replicates = (cfg.get("claims") or {}).get("replicates") or []
    if not replicates:
        return []
    out = []
    if cfg.get("results", "results") != "results":
        out.append(("results", f"claims.replicates writes results/replicates/seed<S>, beside the run's results/; "
                               f"a run with replicates keeps `results: results`, not {cfg['results']!r}"))
    need = max(100, max(_own_seeds(cfg), default=0) + 1)
    seeds = [cfg.get("seed", 0), *replicates]
    close = sorted({(a, b) for i, a in enumerate(seeds) for b in seeds[i + 1:] if abs(a - b) < need})
    if close:
        pairs = ", ".join(f"{a} and {b}" for a, b in close)
        out.append(("claims.replicates", f"master seeds {pairs} lie less than {need} apart, so their zoo runs and "
                                         f"bridge arms (master + the run's own seed) would share seeds; space them by "
                                         f">= {need} (presets/replicate.yaml uses 1000 and 2000)"))
    return out


def _checkpoint_problems(cfg: dict) -> list[tuple[str, str]]:
    out = []
    for family, runs in (cfg.get("zoo") or {}).items():
        for run, spec in (runs or {}).items():
            steps, late = (spec or {}).get("steps"), [c for c in (spec or {}).get("checkpoints") or []
                                                      if spec.get("steps") is not None and c > spec["steps"]]
            if late:
                out.append((f"zoo.{family}.{run}.checkpoints", f"{late} beyond its steps ({steps}): a checkpoint is "
                                                               "saved during training, at most at the last step"))
    return out


def _raise(problems: list[tuple[str, str]], layers, cfg: dict) -> None:
    if problems:
        layers = layers or [("params.yaml", cfg)]
        lines = [f"{key}: {msg}{where_set(key.split('.'), layers)}" for key, msg in problems]
        raise ConfigError(problems_message(f"{source_name(layers)} asks for what the data cannot give", lines))


def check_limits(cfg: dict, *, layers: list[tuple[str, dict]] | None = None) -> dict:
    """Raise one ``ConfigError`` listing every limit ``cfg`` breaks (module docstring), each with its key and the
    layer that set it (``layers`` from ``prh.config.config_layers``; default: params.yaml alone); else return it."""
    name = cfg.get("suite")
    _raise(_knn_problems(cfg, name) + _other_problems(cfg, name), layers, cfg)
    return cfg


def check_device(cfg: dict, *, local: bool) -> None:
    """``device: cuda`` needs a GPU where the jobs run: checked when they run on this machine (``local``; a cluster's
    jobs run elsewhere), before any job, so the data and training jobs do not run first."""
    if cfg.get("device") != "cuda" or not local:
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("device: cuda, but this machine has no CUDA GPU (torch.cuda.is_available() is False): "
                          "set `device: auto` (CUDA when present, else CPU) or `device: cpu`, or run on a GPU machine")


MAX_INT = 2**63 - 1  # int64: what numpy and torch count and index in
MAX_SEED = 2**32 - 1  # numpy's legacy seeding (np.random.seed, RandomState) and sklearn's random_state


def _number_problems(node, key: str = "") -> list[tuple[str, str]]:
    """(dotted key, problem) of every number no run can use: NaN or infinity anywhere, an integer beyond int64, a seed
    beyond 2**32 - 1."""
    import math

    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _number_problems(v, f"{key}.{k}" if key else str(k))]
    if isinstance(node, list):
        return [p for v in node for p in _number_problems(v, key)]
    if isinstance(node, float) and not math.isfinite(node):
        return [(key, f"{node!r} is not a number a run can use; give a finite value")]
    if isinstance(node, int) and not isinstance(node, bool):
        if abs(node) > MAX_INT:
            return [(key, f"{node} is beyond the 64-bit integers numpy and torch compute with (at most {MAX_INT})")]
        if key.rsplit(".", 1)[-1].endswith("seed") and not 0 <= node <= MAX_SEED:
            return [(key, f"a seed must be between 0 and {MAX_SEED} (numpy's limit), not {node}")]
    return []


def check_config(cfg: dict, *, layers: list[tuple[str, dict]] | None = None) -> dict:
    """Schema (defaults filled in place), references, then limits: the checks before any job, in that order, each
    raising one ``ConfigError`` that names the key and where it was set. A zoo run's checkpoints beyond its steps
    come before references: they rename the run's models, so the sets naming them would be the wrong key to blame."""
    numbers = _number_problems(cfg)
    if numbers:  # before the schema: NaN passes every minimum and maximum (comparisons with NaN are false)
        layers_ = layers or [("params.yaml", cfg)]
        raise ConfigError(problems_message(f"{source_name(layers_)} is invalid", [
            f"  {key}: {msg}{where_set(key.split('.'), layers_)}" for key, msg in numbers]))
    validate_schema(cfg, layers=layers)
    if (cfg.get("cluster") or {}).get("rates_file"):
        from prh.cluster import read_rates

        read_rates(cfg["cluster"]["rates_file"])  # what every dry run's plan cost reads: unreadable, named now
    _raise(_checkpoint_problems(cfg), layers, cfg)
    return check_limits(check_references(cfg, layers=layers), layers=layers)


def _override(text: str) -> tuple[str, object]:
    """``key=value`` of ``--config``, the value read as YAML (Snakemake's own parser is stricter: see docs/trust.md)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh check-config", description="check a config as the Snakefile does, before "
                                "any job: schema, names, and the limits only the data rules out")
    p.add_argument("config", nargs="?", default="params.yaml", help="the base config (default: params.yaml)")
    p.add_argument("--configfile", action="append", default=[], help="a file layered on it, as snakemake's (repeatable)")
    p.add_argument("--config", dest="overrides", nargs="+", type=_override, default=[], metavar="KEY=VALUE",
                   help="values layered on top, as snakemake --config")
    a = p.parse_args(argv)
    layers = config_layers(base=a.config, configfiles=a.configfile, overrides=dict(a.overrides) or None)
    if "suites" not in layers[0][1]:
        raise ConfigError(f"{a.config} defines no suites: it looks like an override file, not a base config; "
                          f"layer it on params.yaml: `prh check-config --configfile {a.config}`")
    cfg: dict = {}
    for _, values in layers:
        cfg = merge(cfg, values)
    check_config(cfg, layers=layers)
    print(f"{source_name(layers)}: ok")
