"""The peaks transfer experiment (Imani, Hu & White, section 7.1, Figs 10-12).

For each of ``runs`` independent runs (own tasks, data, initialisation, batch order):

1. draw S, T1 (S's variables, another order) and T2 (the other three), 10,000
   source inputs and 1,000 test inputs (:mod:`prh.studies.transfer.peaks_task`);
2. train a ReLU network (60 -> hidden... -> 1, MSE, Adam) on S to convergence
   (:mod:`prh.studies.transfer.batched_mlp`, stopping rule there);
3. alignment curves of the S, T1 and T2 labels (mean zero) with the input, the
   initial and the trained hidden representation of every hidden layer (Fig 10;
   all layers for the deep variant, Fig 12);
4. transfer (Fig 11): 100 of the source inputs labelled by T1 or T2, a
   zero-initialised linear model trained by gradient descent on each prepared
   representation (constant feature, unit rows), tested on the 1,000 new inputs;
   train/test MSE and ‖w‖ after each number of steps (exact, Proposition 1), the
   best of ``step_sizes`` per task and representation (lowest test MSE averaged
   over the logged steps and the runs), and ‖w‖ against the fraction of the
   training loss removed.

    >>> out = run_peaks(runs=10, hidden=[60], seed=0)
"""

from __future__ import annotations

import numpy as np

from prh.studies.transfer.align_curves import auc, mean_se, run_curves, tau_grid
from prh.studies.transfer.batched_mlp import hidden_layers, init_mlp, train_mlp
from prh.studies.transfer.linear_gd import (
    gd_loss_closed_form,
    gradient_descent,
    learning_curves,
    log_steps,
    prepare_features,
)
from prh.studies.transfer.peaks_task import TASK_NAMES, choose_tasks, sample_peaks

__all__ = ["run_peaks", "REPS"]

REPS = ("input", "init", "trained")
REDUCTION_GRID = np.linspace(0.0, 0.99, 100)


def _sample_runs(*, runs: int, n_source: int, n_target: int, n_test: int, seed: int) -> dict:
    data = {"tasks": [], "x": [], "x_test": [], "target_idx": [], "labels": {t: [] for t in TASK_NAMES},
            "labels_test": {t: [] for t in TASK_NAMES}}
    for r in range(runs):
        rng = np.random.default_rng([seed, r])
        tasks = choose_tasks(rng=rng)
        x, labels = sample_peaks(n=n_source, tasks=tasks, rng=rng)
        x_test, labels_test = sample_peaks(n=n_test, tasks=tasks, rng=rng)
        data["tasks"].append({k: list(v) for k, v in tasks.items()})
        data["x"].append(x)
        data["x_test"].append(x_test)
        data["target_idx"].append(np.sort(rng.choice(n_source, size=n_target, replace=False)))
        for t in TASK_NAMES:
            data["labels"][t].append(labels[t])
            data["labels_test"][t].append(labels_test[t])
    for key in ("x", "x_test", "target_idx"):
        data[key] = np.stack(data[key])
    for key in ("labels", "labels_test"):
        data[key] = {t: np.stack(v) for t, v in data[key].items()}
    return data


def _weight_norm_at(frac: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """‖w‖ when the fraction ``REDUCTION_GRID`` of the training loss is removed (NaN: never)."""
    frac = np.maximum.accumulate(np.nan_to_num(frac, nan=-np.inf))  # GD with ησ² < 1 is monotone
    return np.where(REDUCTION_GRID <= frac.max(), np.interp(REDUCTION_GRID, frac, norms), np.nan)


def _transfer(reps: dict, reps_test: dict, data: dict, *, step_sizes, steps) -> dict:
    """Fig 11 numbers: learning curves per target task and representation, best step size."""
    out = {}
    for task in ("T1", "T2"):
        out[task] = {}
        for rep in REPS:
            sweep = {}
            for eta in step_sizes:
                per_run = []
                for r, idx in enumerate(data["target_idx"]):
                    y_all = data["labels"][task][r]
                    mean = y_all[idx].mean()  # the 100 training labels set the zero
                    per_run.append(learning_curves(
                        prepare_features(reps[rep][r][idx]), y_all[idx] - mean,
                        prepare_features(reps_test[rep][r]), data["labels_test"][task][r] - mean,
                        eta=eta, steps=steps))
                sweep[eta] = {k: np.stack([c[k] for c in per_run]) for k in per_run[0]}
            score = {eta: float(np.mean(c["test_mse"][:, 1:])) for eta, c in sweep.items()}
            best = min(score, key=lambda e: score[e] if np.isfinite(score[e]) else np.inf)
            curves = sweep[best]
            frac = 1.0 - curves["train_mse"] / curves["train_mse"][:, :1]
            at = np.stack([_weight_norm_at(f, w) for f, w in zip(frac, curves["weight_norm"])])
            reached = ~np.isnan(at)
            out[task][rep] = {
                "eta": best,
                "sweep_mean_test_mse": {str(e): s for e, s in score.items()},
                "train_mse": mean_se(curves["train_mse"]),
                "test_mse": mean_se(curves["test_mse"]),
                "weight_norm": mean_se(curves["weight_norm"]),
                "weight_norm_at_reduction": {
                    "mean": [float(np.mean(c[k])) if k.any() else None for c, k in zip(at.T, reached.T)],
                    "runs_reaching": reached.sum(axis=0).tolist(),
                },
                "per_run": {
                    "train_auc": (curves["train_mse"][:, 1:] / curves["train_mse"][:, :1]).mean(axis=1).tolist(),
                    "best_test_mse": curves["test_mse"].min(axis=1).tolist(),
                    **{f"weight_norm_at_{int(q * 100)}pct": at[:, np.searchsorted(REDUCTION_GRID, q - 1e-9)].tolist()
                       for q in (0.25, 0.5, 0.75)},
                },
            }
    return out


def _prop1_check(phi: np.ndarray, y: np.ndarray, eta: float) -> dict:
    steps = np.unique(np.geomspace(1, 2000, 12).astype(int))
    exact = gd_loss_closed_form(phi, y, eta=eta, steps=steps)
    iterated = gradient_descent(phi, y, eta=eta, steps=steps)
    return {"eta": eta, "steps": steps.tolist(), "closed_form": exact.tolist(), "iterated": iterated.tolist(),
            "max_rel_error": float(np.max(np.abs(exact - iterated) / np.abs(iterated)))}


def run_peaks(*, runs: int = 10, n_source: int = 10000, n_target: int = 100, n_test: int = 1000,
              hidden=(60,), lr: float = 1e-3, batch_size: int = 64, max_epochs: int = 300,
              patience: int = 10, min_improvement: float = 0.05, num_taus: int = 201,
              transfer: bool = True, step_sizes=(0.001, 0.003, 0.01), max_steps: int = 100000,
              num_steps: int = 200, seed: int = 0) -> dict:
    """Run the peaks experiment (module docstring) and return its numbers for JSON.

    Parameters
    ----------
    runs, n_source, n_target, n_test : independent runs and set sizes (paper: 10, 10000, 100, 1000)
    hidden : hidden layer widths (paper: [60]; the deep variant of Fig 12: [60, 60, 60])
    lr, batch_size, max_epochs, patience, min_improvement : Adam and the stopping rule
    num_taus : thresholds on [0, √n_source] for the curves
    transfer : also run the linear transfer of Fig 11 (on the last hidden layer)
    step_sizes, max_steps, num_steps : GD step sizes swept and the log-spaced step grid

    Returns
    -------
    dict with ``alignment`` (``curves[state][layer][task]`` mean/se and ``auc`` per
    run; state init|trained, layer input|hidden1...), ``training``, ``tasks`` and, if
    ``transfer``, ``steps``, ``reduction_grid``, ``transfer`` and ``prop1_check``.
    """
    hidden = [int(h) for h in hidden]
    if not hidden or n_target > n_source or runs < 1:
        raise ValueError("need at least one hidden layer, runs >= 1 and n_target <= n_source")
    data = _sample_runs(runs=runs, n_source=n_source, n_target=n_target, n_test=n_test, seed=seed)
    centred = {t: y - y.mean(axis=1, keepdims=True) for t, y in data["labels"].items()}
    params0 = init_mlp(runs=runs, sizes=[data["x"].shape[2], *hidden, 1], seed=seed)
    trained, info = train_mlp(params0, x=data["x"], y=centred["S"], loss="mse", lr=lr,
                              batch_size=batch_size, max_epochs=max_epochs, patience=patience,
                              min_improvement=min_improvement, seed=seed, desc=f"peaks {hidden}")
    layers = {"init": hidden_layers(params0, data["x"]), "trained": hidden_layers(trained, data["x"])}
    taus = tau_grid(n=n_source, num=num_taus)
    names = ["input"] + [f"hidden{i + 1}" for i in range(len(hidden))]
    alignment = {"curves": {}, "auc": {}}
    for state in ("init", "trained"):
        alignment["curves"][state], alignment["auc"][state] = {}, {}
        for name, rep in zip(names, [data["x"]] + layers[state]):
            alignment["curves"][state][name], alignment["auc"][state][name] = {}, {}
            for task in TASK_NAMES:
                curves = run_curves(rep, centred[task], taus)
                alignment["curves"][state][name][task] = mean_se(curves)
                alignment["auc"][state][name][task] = auc(curves, centred[task], taus).tolist()
    out = {
        "taus": taus.tolist(), "layers": names, "tasks": data["tasks"], "alignment": alignment,
        "training": {**{k: info[k] for k in ("epochs", "converged", "final_loss")},
                     "label_variance": float(centred["S"].var())},
    }
    if transfer:
        reps = {"input": data["x"], "init": layers["init"][-1], "trained": layers["trained"][-1]}
        reps_test = {"input": data["x_test"], "init": hidden_layers(params0, data["x_test"])[-1],
                     "trained": hidden_layers(trained, data["x_test"])[-1]}
        steps = log_steps(max_steps=max_steps, num=num_steps)
        out["steps"] = steps.tolist()
        out["reduction_grid"] = REDUCTION_GRID.tolist()
        out["transfer"] = _transfer(reps, reps_test, data, step_sizes=step_sizes, steps=steps)
        idx = data["target_idx"][0]  # Proposition 1 on a real problem of this experiment
        out["prop1_check"] = {"task": "T1", "rep": "trained", "run": 0, **_prop1_check(
            prepare_features(reps["trained"][0][idx]), centred["T1"][0][idx] - centred["T1"][0][idx].mean(),
            out["transfer"]["T1"]["trained"]["eta"])}
    return out
