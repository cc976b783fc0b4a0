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
The paper suite's VTAB splits: ``prh.evaluation.probe_splits``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from tqdm import tqdm

from prh.io import load_features, read_json, write_json

__all__ = ["C_GRID", "split_indices", "probe_task", "probe_features", "run_probes", "read_probe_results", "main"]

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


def fit_predict(x_fit, y_fit, x_eval, *, c: float) -> np.ndarray:
    """The probe's predicted classes of ``x_eval`` (standardised logistic regression at inverse strength ``c``)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if len(np.unique(y_fit)) < 2:  # one class only: the probe can only answer it
        return np.full(len(x_eval), y_fit[0])
    scaler = StandardScaler().fit(x_fit)
    with warnings.catch_warnings():
        # A probe stopped at max_iter is still a valid (slightly under-fitted) probe; the C grid is fixed.
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LogisticRegression(C=c, max_iter=300).fit(scaler.transform(x_fit), y_fit)
    return clf.predict(scaler.transform(x_eval))


def fit_score(x_fit, y_fit, x_eval, y_eval, *, c: float) -> float:
    return float(np.mean(fit_predict(x_fit, y_fit, x_eval, c=c) == y_eval))


def probe_task(feats: np.ndarray, labels: np.ndarray, splits: dict, *, cs=C_GRID, layer: str = "last",
               num_classes: int | None = None, layers=None, correct: bool = False) -> dict:
    """Probe one task on N x L x D features (see the module docstring for the protocol).

    Parameters
    ----------
    feats : array N x L x D (or N x D, one layer).
    labels : int array (N,); negative values mark items the task does not apply to.
    splits : dict with ``train``, ``val``, ``test`` index arrays (``split_indices``).
    cs : the grid of inverse regularisation strengths C.
    layer : ``"last"`` or ``"best"`` (chosen on validation).
    num_classes : for ``uniform_chance``; default: the number of distinct labels.
    layers : with ``layer="best"``, the layer indices validation chooses among (default: all).
    correct : also return ``correct``, per test item (``test_items``) whether the probe got it right.

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
    if layers is not None and (layer != "best" or not layers or not set(layers) <= set(range(feats.shape[1]))):
        raise ValueError(f"layers={layers} needs layer='best' and indices among the {feats.shape[1]} layers")
    layers = (layers if layers is not None else range(feats.shape[1])) if layer == "best" else [feats.shape[1] - 1]
    best = (-1.0, None, None)
    for li in layers:
        for c in cs:
            acc = fit_score(feats[tr, li], labels[tr], feats[va, li], labels[va], c=c)
            if acc > best[0]:
                best = (acc, li, c)
    val_acc, li, c = best
    fit = np.concatenate([tr, va])
    k = num_classes or len(np.unique(labels[labels >= 0]))
    right = fit_predict(feats[fit, li], labels[fit], feats[te, li], c=c) == labels[te]
    out = {
        "accuracy": float(np.mean(right)),
        "val_accuracy": val_acc, "C": c, "layer": int(li),
        "chance": chance_level(labels[fit], labels[te]), "uniform_chance": 1.0 / k,
        "n_train": len(tr), "n_val": len(va), "n_test": len(te),
    }
    if correct:
        out.update(correct=right, test_items=te)
    return out


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
    return model_summary(tasks)


def model_summary(tasks: dict) -> dict:
    """``{"tasks", "mean_accuracy", "mean_chance"}`` of one model from its per-task probe results."""
    return {"tasks": tasks,
            "mean_accuracy": float(np.mean([r["accuracy"] for r in tasks.values()])),
            "mean_chance": float(np.mean([r["chance"] for r in tasks.values()]))}


def run_probes(*, data: str, names: list[str], features: list[str], out: str, cs=C_GRID, layer: str = "last",
               seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
               tasks: list[str] | None = None) -> dict:
    """Probe each model's features (``features[i]`` belongs to ``names[i]``) on the shapes-world tasks
    (``tasks``: a subset of ``prh.data.tasks.TASKS`` by name; None: all).

    ``data`` is the shapes dataset the features were extracted from (labels come from its
    scenes). Writes and returns ``{"settings", "tasks": {task: chance levels}, "models":
    {name: probe_features(...)}}``.
    """
    from prh.data.shapes import load_dataset
    from prh.data.tasks import TASKS, task_labels

    if len(names) != len(features) or not names:
        raise ValueError(f"names ({len(names)}) and features ({len(features)}) must be non-empty and pair up")
    ds = load_dataset(data)
    labels = task_labels(ds.scenes, tasks)
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
                     "tasks": sorted(labels),
                     "val_fraction": val_fraction, "test_fraction": test_fraction},
        "tasks": {t: {"num_classes": num_classes[t], "chance": r["chance"], "uniform_chance": r["uniform_chance"]}
                  for t, r in first.items()},
        "models": models,
    }
    write_json(out, result)
    return result


def read_probe_results(path) -> dict:
    """A ``run_probes`` JSON (``models.<m>.tasks``, ``mean_accuracy``); a file of another shape raises
    ``CorruptFileError`` naming it and the shape expected."""
    return read_json(path, keys=("models",), what="`prh probe` JSON")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh probe", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="shapes dataset dir the features come from")
    p.add_argument("--names", nargs="+", required=True, help="model names, in the order of --features")
    p.add_argument("--features", nargs="+", required=True, help="features files (N x L x D safetensors)")
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--cs", type=float, nargs="+", default=list(C_GRID), help="C grid of the logistic regression")
    p.add_argument("--layer", choices=("last", "best"), default="last")
    p.add_argument("--tasks", nargs="+", default=None, help="task names to probe (default: every task)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/val/test split")
    p.add_argument("--val-fraction", type=float, default=0.2)
    p.add_argument("--test-fraction", type=float, default=0.2)
    args = vars(p.parse_args(argv))
    result = run_probes(**args)
    for name, r in result["models"].items():
        print(f"{name}: mean accuracy {r['mean_accuracy']:.3f} (chance {r['mean_chance']:.3f})")
