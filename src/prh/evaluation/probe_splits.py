"""Linear probes on datasets with their own train and test splits (VTAB, the paper suite).

The paper suite (PRH appendix C.1: linear probes on VTAB, train sets capped at 10,000
items) comes with its own train and test splits, one dataset folder each (``prh
hub-dataset``: ``labels.npy``; features at ``<features-root>/<folder name>/<model>.safetensors``).
``run_split_probes`` (``prh probe-splits``) applies the same protocol to them:

- the test split is the dataset's own; the train split (items with a label, at most
  ``max_train`` of them, a seeded subsample) is cut, seeded and shared by every model,
  into fit / validation parts (``val_fraction`` of it for validation);
- C (and the layer) is chosen on validation, the probe refitted on the whole train split
  with it and scored on test: exactly ``probe_task`` with train = fit part, val =
  validation part, test = the test split. Test labels are never used to choose anything;
- only the layer(s) the probe needs are read from disk (the last one, cut to its real
  width when the meta records ``layer_dims`` of zero-padded CNN stages).

    prh probe-splits --names a b --features-root results/features \\
        --tasks '{"caltech101": {"train": "results/data/vtab_caltech101_train",
                                 "test": "results/data/vtab_caltech101_test"}}' \\
        --out results/experiments/paper/vtab_probes.json

The workflow runs one such job per VTAB task and gathers them with ``merge_split_probes``
(``prh merge-probe-splits``): per-task results depend on that task alone, so the gathered file
equals the one a single job over every task writes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tqdm import tqdm

from prh.evaluation.probes import C_GRID, model_summary, probe_task
from prh.io import features_meta_path, json_object, open_features, read_features_meta, read_json, write_json
from prh.errors import UsageError

__all__ = ["split_train", "load_probe_layers", "run_split_probes", "merge_split_probes", "splits_main", "merge_main"]


def split_train(labels: np.ndarray, *, seed: int = 0, val_fraction: float = 0.2,
                max_train: int | None = None) -> dict:
    """Seeded fit / validation parts of a train split: sorted ``train`` and ``val`` index arrays.

    Only items with a label (``labels >= 0``) are kept; when more than ``max_train`` remain,
    a seeded subsample of ``max_train`` is drawn first (PRH C.1 caps VTAB train sets at
    10,000). Of the n kept items, round(n * val_fraction) go to ``val``, the rest to ``train``.
    The parts depend only on ``labels``, ``seed`` and the fractions, so every model gets the same.
    """
    labels = np.asarray(labels)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction} must be in (0, 1)")
    if max_train is not None and max_train < 2:
        raise ValueError(f"max_train={max_train} must be at least 2 (or None for no cap)")
    keep = np.flatnonzero(labels >= 0)
    rng = np.random.default_rng([seed, 2])
    if max_train is not None and len(keep) > max_train:
        keep = rng.choice(keep, size=max_train, replace=False)
    n_val = int(round(len(keep) * val_fraction))
    if not 1 <= n_val < len(keep):
        raise ValueError(f"{len(keep)} labelled train items are too few to hold out val_fraction={val_fraction}; "
                         "use a larger train split or another val_fraction")
    keep = rng.permutation(keep)
    return {"train": np.sort(keep[n_val:]), "val": np.sort(keep[:n_val])}


def load_probe_layers(path: str | Path, layer: str = "last") -> tuple[np.ndarray, int]:
    """Read from an N x L x D features file only what a probe with ``layer`` needs, as float32.

    ``layer="last"``: N x 1 x d, the last layer cut to its real width d (``layer_dims[-1]``
    of the meta when narrower stages were zero-padded to D, else D). ``layer="best"``: all
    N x L x D (zero padding is left in place: a constant column changes no probe).

    Returns
    -------
    (features, index of the first returned layer: in the file, or with ``layer="last"`` the
    model's block, ``layer_indices[-1]`` of the meta when the file keeps only some layers)
    """
    path = Path(path)
    if layer not in ("last", "best"):
        raise ValueError(f"layer={layer!r} must be 'last' or 'best'")
    meta_path = features_meta_path(path)
    meta = read_features_meta(path)
    dims = meta.get("layer_dims")
    with open_features(path) as f:
        sl = f.get_slice("feats")
        shape = list(sl.get_shape())
        if len(shape) != 3:
            raise ValueError(f"{path} holds features of shape {shape}; expected N x L x D")
        n_layers, width = shape[1], shape[2]
        if dims is not None and (len(dims) != n_layers or max(dims) > width):
            raise ValueError(f"layer_dims {list(dims)} in {meta_path} does not fit features of shape {shape}")
        if layer == "best":
            if meta.get("layers") == "last":
                raise ValueError(f"{path} holds the last layer only (`--layers last`), so layer='best' cannot "
                                 "choose among layers: probe with layer='last', or re-extract with --layers all")
            return sl[:].float().numpy(), 0
        # a last-layer-only file (`prh extract-vision --layers last`) names the model's block in layer_indices
        last = (meta.get("layer_indices") or [n_layers - 1])[-1]
        return sl[:, n_layers - 1:n_layers, :int(dims[-1]) if dims else width].float().numpy(), last


def _read_labels(data_dir: str | Path) -> np.ndarray:
    path = Path(data_dir) / "labels.npy"
    if not path.exists():
        raise ValueError(f"{data_dir} has no labels.npy; materialise it with `prh fetch-dataset ... --label-column` "
                         "(or `dvc pull results/data`)")
    labels = np.load(path, allow_pickle=False)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path} must be a 1-D int array, got {labels.dtype} of shape {labels.shape}")
    if not np.any(labels >= 0):
        raise ValueError(f"{path} has no labels (all -1): give `prh fetch-dataset` the dataset's --label-column")
    return labels


def _num_classes(train_dir: str | Path, labels: np.ndarray) -> int:
    """The dataset's class count: its ``label_names`` in meta.json, else the distinct labels seen."""
    meta_path = Path(train_dir) / "meta.json"
    names = (read_json(meta_path) if meta_path.exists() else {}).get("label_names")
    return len(names) if names else len(np.unique(labels[labels >= 0]))


def _features_path(features_root: str | Path, data_dir: str | Path, name: str) -> Path:
    return Path(features_root) / Path(data_dir).name / f"{name}.safetensors"


def run_split_probes(*, tasks: dict[str, dict], names: list[str], features_root: str, out: str, cs=C_GRID,
                     layer: str = "last", seed: int = 0, val_fraction: float = 0.2,
                     max_train: int | None = 10_000) -> dict:
    """Probe every model on every task that has its own train and test split (PRH C.1, VTAB).

    Parameters
    ----------
    tasks : ``{task: {"train": dataset dir, "test": dataset dir}}``; each dir holds ``labels.npy``
        (``prh fetch-dataset``), and the features of model m on it are
        ``<features_root>/<dir name>/<m>.safetensors`` (N x L x D, rows in ``labels.npy`` order).
    names : the models.
    cs, layer : as in ``probe_task``.
    seed, val_fraction, max_train : the validation part of each train split (``split_train``).

    For model m and task t, with F = features, y = labels, the train split cut into fit part A
    and validation part V, and the test split T::

        C* = argmax_C acc(probe_C fitted on A, V)     (first C of the grid on ties)
        accuracy = acc(probe_C* fitted on A ∪ V, T)

    exactly ``probe_task`` on the rows [train split; test split]. ``chance`` is the accuracy on
    T of the majority class of A ∪ V.

    Returns
    -------
    dict written to ``out``, the ``prh probe`` format: ``settings``, ``tasks`` (``num_classes``,
    ``chance``, ``uniform_chance``, ``n_train``, ``n_val``, ``n_test`` per task), ``models``
    (``{name: {"tasks": {task: probe_task(...)}, "mean_accuracy", "mean_chance"}}``).
    """
    if not names or not tasks:
        raise UsageError(f"names ({len(names)}) and tasks ({len(tasks)}) must be non-empty")
    if len(set(names)) != len(names):
        raise ValueError(f"names {names} has duplicates; give each model once")
    bad = [t for t, d in tasks.items() if not isinstance(d, dict) or set(d) != {"train", "test"}]
    if bad:
        raise ValueError(f"tasks {bad} must each map to {{'train': dataset dir, 'test': dataset dir}}")
    labels, parts, num_classes, n_train_split = {}, {}, {}, {}
    for t, d in sorted(tasks.items()):  # every labels file is checked before any feature is read
        y_train, y_test = _read_labels(d["train"]), _read_labels(d["test"])
        part = split_train(y_train, seed=seed, val_fraction=val_fraction, max_train=max_train)
        n_train_split[t] = len(y_train)
        labels[t] = np.concatenate([y_train, y_test])  # rows: [train split; test split]
        parts[t] = {**part, "test": len(y_train) + np.arange(len(y_test))}
        num_classes[t] = _num_classes(d["train"], labels[t])
    models = {}
    for name in tqdm(names, desc="split probes"):
        results = {}
        for t in sorted(tasks):
            blocks = []
            for split in ("train", "test"):
                path = _features_path(features_root, tasks[t][split], name)
                feats, first = load_probe_layers(path, layer)
                expected = n_train_split[t] if split == "train" else len(labels[t]) - n_train_split[t]
                if len(feats) != expected:
                    raise ValueError(f"{path} has {len(feats)} items but {tasks[t][split]}/labels.npy has {expected}; "
                                     f"extract the features of {name} from {tasks[t][split]}")
                blocks.append(feats)
            r = probe_task(np.concatenate(blocks), labels[t], parts[t], cs=cs, layer=layer,
                           num_classes=num_classes[t])
            results[t] = {**r, "layer": r["layer"] + first}
        models[name] = model_summary(results)
    first_model = next(iter(models.values()))["tasks"]
    result = {
        "settings": {"tasks": {t: {k: str(v) for k, v in d.items()} for t, d in sorted(tasks.items())},
                     "features_root": str(features_root), "seed": seed, "cs": list(cs), "layer": layer,
                     "val_fraction": val_fraction, "max_train": max_train},
        "tasks": {t: {"num_classes": num_classes[t], "chance": r["chance"], "uniform_chance": r["uniform_chance"],
                      **{k: r[k] for k in ("n_train", "n_val", "n_test")}}
                  for t, r in first_model.items()},
        "models": models,
    }
    write_json(out, result)
    return result


def merge_split_probes(*, inputs: list[str | Path], out: str | Path) -> dict:
    """Gather ``run_split_probes`` results of disjoint task sets (one cluster job per VTAB task) into one.

    Every input must probe the same models with the same settings (seed, C grid, layer, fractions,
    features root) on tasks no other input has. Per model, the per-task results are united and
    ``mean_accuracy`` / ``mean_chance`` recomputed over all tasks (``model_summary``): the same file
    ``run_split_probes`` writes when given every task at once.
    """
    if not inputs:
        raise ValueError("inputs is empty: give the JSONs of `prh probe-splits`, one per task set")
    results = [read_json(p) for p in inputs]
    first = results[0]
    shared = {k: v for k, v in first["settings"].items() if k != "tasks"}
    tasks, per_model = {}, {name: {} for name in first["models"]}
    settings_tasks = {}
    for path, r in zip(inputs, results):
        if {k: v for k, v in r["settings"].items() if k != "tasks"} != shared:
            raise ValueError(f"{path} was probed with other settings than {inputs[0]}; rerun both with the same ones")
        if list(r["models"]) != list(per_model):
            raise ValueError(f"{path} probes models {list(r['models'])}, {inputs[0]} {list(per_model)}; "
                             "give every task job the same --names")
        overlap = sorted(set(r["tasks"]) & set(tasks))
        if overlap:
            raise ValueError(f"tasks {overlap} of {path} appear in another input; give each task once")
        tasks.update(r["tasks"])
        settings_tasks.update(r["settings"]["tasks"])
        for name, m in r["models"].items():
            per_model[name].update(m["tasks"])
    result = {
        "settings": {"tasks": dict(sorted(settings_tasks.items())), **shared},
        "tasks": dict(sorted(tasks.items())),
        "models": {name: model_summary(dict(sorted(t.items()))) for name, t in per_model.items()},
    }
    write_json(out, result)
    return result


def merge_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh merge-probe-splits",
                                description="gather per-task `prh probe-splits` JSONs into one (VTAB)")
    p.add_argument("--inputs", nargs="+", required=True, help="JSONs of `prh probe-splits`, disjoint task sets")
    p.add_argument("--out", required=True, help="JSON to write (the `prh probe` format)")
    a = p.parse_args(argv)
    result = merge_split_probes(inputs=a.inputs, out=a.out)
    print(f"{len(result['tasks'])} tasks, {len(result['models'])} models -> {a.out}")


def splits_main(argv: list[str] | None = None) -> None:

    p = argparse.ArgumentParser(prog="prh probe-splits",
                                description="linear probes on datasets with their own train/test splits (VTAB)")
    p.add_argument("--tasks", type=json_object, required=True,
                   help='JSON {task: {"train": dataset dir, "test": dataset dir}}')
    p.add_argument("--names", nargs="+", required=True, help="model names")
    p.add_argument("--features-root", default="results/features",
                   help="features of model m on dataset dir D: <root>/<name of D>/<m>.safetensors")
    p.add_argument("--out", required=True, help="JSON to write (the `prh probe` format)")
    p.add_argument("--cs", type=float, nargs="+", default=list(C_GRID), help="C grid of the logistic regression")
    p.add_argument("--layer", choices=("last", "best"), default="last")
    p.add_argument("--seed", type=int, default=0, help="seed of the fit/validation cut of each train split")
    p.add_argument("--val-fraction", type=float, default=0.2, help="share of each train split held out to choose C")
    p.add_argument("--max-train", type=int, default=10_000, help="cap on train items per task (0: no cap)")
    args = vars(p.parse_args(argv))
    args["max_train"] = args["max_train"] or None
    result = run_split_probes(**args)
    for name, r in result["models"].items():
        print(f"{name}: mean accuracy {r['mean_accuracy']:.3f} (chance {r['mean_chance']:.3f})")
