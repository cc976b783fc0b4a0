"""Linear probes on frozen features: each vision model's competence on each task.

PRH section 2.2 (Fig. 2, left) measures a vision model's competence by linear
transfer: a linear classifier on frozen features, one per downstream task (VTAB
in the paper; the shapes-world task suite offline, ``prh.data.tasks``). Here:

- one fixed split of the items, shared by every model and task (seeded):
  train / validation / test = 60 / 20 / 20 % by default;
- features of one layer are standardised (mean and std of the fitting items), then
  multinomial logistic regression, p(y = c | x) ∝ exp(w_cᵀ x + b_c), minimising
  ½‖W‖² + C Σ_i -log p(y_i | x_i), is fitted for every C of a fixed grid;
- the C (and, with ``layer="best"``, the layer) with the highest validation accuracy
  is kept; the probe is refitted on train + validation with it and scored on test;
- chance = accuracy on test of always answering the most frequent train + validation
  class (what a probe on uninformative features reaches); 1/num_classes is reported too.

``layer="last"`` (the default) probes the last layer of the features (last block's
class token, or last stage's average pool): the representation a downstream user
would take, so competence rates the model as shipped. ``layer="best"`` lets
validation choose among all layers (L times more fits).
Items whose label is negative (the task is undefined for that scene) are left out
of that task.

    prh probe --data results/data/shapes_vision --names a b \\
        --features results/features/shapes_vision/a.safetensors results/features/shapes_vision/b.safetensors \\
        --out results/experiments/zoo/vision.json

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
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from tqdm import tqdm

from prh.io import features_meta_path, load_features, read_json, write_json

__all__ = ["C_GRID", "split_indices", "probe_task", "probe_features", "run_probes", "main",
           "split_train", "load_probe_layers", "run_split_probes", "splits_main"]

C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)  # inverse regularisation strengths tried on validation


def split_indices(n: int, *, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2) -> dict:
    """Seeded partition of ``range(n)`` into sorted ``train``, ``val`` and ``test`` index arrays.

    The test part is the task suite's own split (``prh.data.tasks.train_test_split``);
    the validation part is drawn from the rest.
    """
    from prh.data.tasks import train_test_split

    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(f"val_fraction={val_fraction} and test_fraction={test_fraction} must be in (0, 1) "
                         "and sum to less than 1")
    rest, test = train_test_split(n, test_fraction=test_fraction, seed=seed)
    n_val = int(round(n * val_fraction))
    if not 1 <= n_val < len(rest):
        raise ValueError(f"n={n} items are too few to split {val_fraction}/{test_fraction}; use more items")
    rest = np.random.default_rng([seed, 1]).permutation(rest)
    return {"train": np.sort(rest[n_val:]), "val": np.sort(rest[:n_val]), "test": test}


def _fit_score(x_fit, y_fit, x_eval, y_eval, *, c: float) -> float:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if len(np.unique(y_fit)) < 2:  # one class only: the probe can only answer it
        return float(np.mean(y_eval == y_fit[0]))
    scaler = StandardScaler().fit(x_fit)
    with warnings.catch_warnings():
        # A probe stopped at max_iter is still a valid (slightly under-fitted) probe; the C grid is fixed.
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LogisticRegression(C=c, max_iter=300).fit(scaler.transform(x_fit), y_fit)
    return float(np.mean(clf.predict(scaler.transform(x_eval)) == y_eval))


def probe_task(feats: np.ndarray, labels: np.ndarray, splits: dict, *, cs=C_GRID, layer: str = "last",
               num_classes: int | None = None) -> dict:
    """Probe one task on N x L x D features (see the module docstring for the protocol).

    Parameters
    ----------
    feats : array N x L x D (or N x D, one layer).
    labels : int array (N,); negative values mark items the task does not apply to.
    splits : dict with ``train``, ``val``, ``test`` index arrays (``split_indices``).
    cs : the grid of inverse regularisation strengths C.
    layer : ``"last"`` or ``"best"`` (chosen on validation).
    num_classes : for ``uniform_chance``; default: the number of distinct labels.

    Returns
    -------
    dict : ``accuracy`` (test), ``val_accuracy``, ``C``, ``layer`` (index), ``chance`` (majority
        class), ``uniform_chance``, ``n_train``, ``n_val``, ``n_test``.
    """
    from prh.data.tasks import chance_level

    feats = np.asarray(feats, dtype=np.float32)
    feats = feats[:, None, :] if feats.ndim == 2 else feats
    labels = np.asarray(labels)
    if feats.ndim != 3 or len(feats) != len(labels):
        raise ValueError(f"feats must be N x L x D with N = len(labels) = {len(labels)}, got {feats.shape}")
    if layer not in ("last", "best"):
        raise ValueError(f"layer={layer!r} must be 'last' or 'best'")
    if len(cs) == 0:
        raise ValueError("cs is empty; give at least one inverse regularisation strength C")
    tr, va, te = (np.asarray(splits[k])[labels[splits[k]] >= 0] for k in ("train", "val", "test"))
    if min(len(tr), len(va), len(te)) == 0:
        raise ValueError("a split has no item with a defined label; use more items")
    layers = range(feats.shape[1]) if layer == "best" else [feats.shape[1] - 1]
    best = (-1.0, None, None)
    for li in layers:
        for c in cs:
            acc = _fit_score(feats[tr, li], labels[tr], feats[va, li], labels[va], c=c)
            if acc > best[0]:
                best = (acc, li, c)
    val_acc, li, c = best
    fit = np.concatenate([tr, va])
    k = num_classes or len(np.unique(labels[labels >= 0]))
    return {
        "accuracy": _fit_score(feats[fit, li], labels[fit], feats[te, li], labels[te], c=c),
        "val_accuracy": val_acc, "C": c, "layer": int(li),
        "chance": chance_level(labels[fit], labels[te]), "uniform_chance": 1.0 / k,
        "n_train": len(tr), "n_val": len(va), "n_test": len(te),
    }


def probe_features(feats: np.ndarray, labels: dict[str, np.ndarray], splits: dict, *, cs=C_GRID,
                   layer: str = "last", num_classes: dict[str, int] | None = None) -> dict:
    """Probe every task on one model's features.

    Returns ``{"tasks": {task: probe_task(...)}, "mean_accuracy": mean test accuracy over tasks,
    "mean_chance": mean chance over tasks}``.
    """
    if not labels:
        raise ValueError("labels is empty; give at least one task")
    tasks = {t: probe_task(feats, y, splits, cs=cs, layer=layer, num_classes=(num_classes or {}).get(t))
             for t, y in sorted(labels.items())}
    return _model_summary(tasks)


def _model_summary(tasks: dict) -> dict:
    """``{"tasks", "mean_accuracy", "mean_chance"}`` of one model from its per-task probe results."""
    return {"tasks": tasks,
            "mean_accuracy": float(np.mean([r["accuracy"] for r in tasks.values()])),
            "mean_chance": float(np.mean([r["chance"] for r in tasks.values()]))}


def run_probes(*, data: str, names: list[str], features: list[str], out: str, cs=C_GRID, layer: str = "last",
               seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2) -> dict:
    """Probe each model's features (``features[i]`` belongs to ``names[i]``) on the shapes-world tasks.

    ``data`` is the shapes dataset the features were extracted from (labels come from its
    scenes). Writes and returns ``{"settings", "tasks": {task: chance levels}, "models":
    {name: probe_features(...)}}``.
    """
    from prh.data.shapes import load_dataset
    from prh.data.tasks import TASKS, task_labels

    if len(names) != len(features) or not names:
        raise ValueError(f"names ({len(names)}) and features ({len(features)}) must be non-empty and pair up")
    ds = load_dataset(data)
    labels = task_labels(ds.scenes)
    num_classes = {t: TASKS[t].num_classes for t in labels}
    splits = split_indices(len(ds.scenes), seed=seed, val_fraction=val_fraction, test_fraction=test_fraction)
    models = {}
    for name, path in tqdm(list(zip(names, features)), desc="probes"):
        feats = load_features(path).float().numpy()
        if len(feats) != len(ds.scenes):
            raise ValueError(f"{path} has {len(feats)} items but {data} has {len(ds.scenes)}; "
                             "extract the features from this dataset")
        models[name] = probe_features(feats, labels, splits, cs=cs, layer=layer, num_classes=num_classes)
    first = next(iter(models.values()))["tasks"]
    result = {
        "settings": {"dataset": str(data), "n": len(ds.scenes), "seed": seed, "cs": list(cs), "layer": layer,
                     "val_fraction": val_fraction, "test_fraction": test_fraction},
        "tasks": {t: {"num_classes": num_classes[t], "chance": r["chance"], "uniform_chance": r["uniform_chance"]}
                  for t, r in first.items()},
        "models": models,
    }
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh probe", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="shapes dataset dir the features come from")
    p.add_argument("--names", nargs="+", required=True, help="model names, in the order of --features")
    p.add_argument("--features", nargs="+", required=True, help="features files (N x L x D safetensors)")
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--cs", type=float, nargs="+", default=list(C_GRID), help="C grid of the logistic regression")
    p.add_argument("--layer", choices=("last", "best"), default="last")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/val/test split")
    p.add_argument("--val-fraction", type=float, default=0.2)
    p.add_argument("--test-fraction", type=float, default=0.2)
    args = vars(p.parse_args(argv))
    result = run_probes(**args)
    for name, r in result["models"].items():
        print(f"{name}: mean accuracy {r['mean_accuracy']:.3f} (chance {r['mean_chance']:.3f})")


# --------------------------------------------------------------------------------------------
# The paper suite: datasets with their own train and test splits (VTAB).


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
    (features, index of the first returned layer in the file)
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"features file {path} does not exist: run the workflow (snakemake {path}) "
                                "or fetch it with `dvc pull results/features`")
    if layer not in ("last", "best"):
        raise ValueError(f"layer={layer!r} must be 'last' or 'best'")
    meta_path = features_meta_path(path)
    dims = (read_json(meta_path) if meta_path.exists() else {}).get("layer_dims")
    with safe_open(str(path), framework="pt") as f:
        sl = f.get_slice("feats")
        shape = list(sl.get_shape())
        if len(shape) != 3:
            raise ValueError(f"{path} holds features of shape {shape}; expected N x L x D")
        n_layers, width = shape[1], shape[2]
        if dims is not None and (len(dims) != n_layers or max(dims) > width):
            raise ValueError(f"layer_dims {list(dims)} in {meta_path} does not fit features of shape {shape}")
        if layer == "best":
            return sl[:].float().numpy(), 0
        return sl[:, n_layers - 1:n_layers, :int(dims[-1]) if dims else width].float().numpy(), n_layers - 1


def _read_labels(data_dir: str | Path) -> np.ndarray:
    path = Path(data_dir) / "labels.npy"
    if not path.exists():
        raise ValueError(f"{data_dir} has no labels.npy; materialise it with `prh hub-dataset ... --label-column` "
                         "(or `dvc pull results/data`)")
    labels = np.load(path, allow_pickle=False)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path} must be a 1-D int array, got {labels.dtype} of shape {labels.shape}")
    if not np.any(labels >= 0):
        raise ValueError(f"{path} has no labels (all -1): give `prh hub-dataset` the dataset's --label-column")
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
        (``prh hub-dataset``), and the features of model m on it are
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
        raise ValueError(f"names ({len(names)}) and tasks ({len(tasks)}) must be non-empty")
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
        models[name] = _model_summary(results)
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


def splits_main(argv: list[str] | None = None) -> None:
    from prh.cli import json_object

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
