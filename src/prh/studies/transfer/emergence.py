"""Alignment emerges from training (Imani, Hu & White, Fig 2) and grows with depth (Fig 7).

Fig 2 (section 4.2): two classes of handwritten digits, labels ±1. (a) the input
is well aligned with the true labels; (b) not with shuffled labels; a network with
three hidden layers as wide as the input, trained with Adam (batch 64, 1000
epochs) on the *shuffled* labels, has a last hidden layer that is poorly aligned
with them before training (c) and well aligned after (d).

Fig 7 (section 5): the same data with the true labels, three hidden layers of
width 128 trained to convergence; alignment of the input and of every hidden
layer before and after training. The paper finds layers closer to the output
better aligned after training, and the order reversed at initialisation.

Data: ``digits`` is scikit-learn's bundled 8 × 8 digits (classes 0 and 1, 360
images, offline); ``mnist`` is the paper's MNIST (``ylecun/mnist`` from the
Hugging Face hub at a pinned revision, ``per_class`` training images per class).
Pixels are scaled to [0, 1] and each image to unit length. Networks are trained
with the logistic loss on 0/1 targets.

    >>> x, y = load_binary_digits(dataset="digits")
    >>> fig2, fig7 = run_emergence(x=x, y=y, runs=5, seed=0)
"""

from __future__ import annotations

import numpy as np

from prh.studies.transfer.align_curves import auc, mean_se, run_curves, tau_grid
from prh.studies.transfer.batched_mlp import hidden_layers, init_mlp, train_mlp
from prh.studies.transfer.linear_gd import label_spectrum

__all__ = ["MNIST_REPO", "MNIST_REVISION", "load_binary_digits", "run_emergence"]

MNIST_REPO = "ylecun/mnist"
MNIST_REVISION = "77f3279092a1c1579b2250db8eafed0ad422088c"


def load_binary_digits(*, dataset: str = "digits", classes=(0, 1), per_class: int = 5000,
                       revision: str = MNIST_REVISION, repo: str = MNIST_REPO,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images of two digit classes as unit-length pixel vectors, and 0/1 labels.

    Parameters
    ----------
    dataset : "digits" (scikit-learn, offline, all images of the two classes) or
        "mnist" (``repo``'s train split at ``revision``; needs the hub or its cache)
    classes : the two digits; label 1 means ``classes[1]``
    per_class : MNIST only: images sampled per class (the paper: 5000)
    repo : MNIST only: the hub dataset (or a local folder with the same ``image``/``label`` columns)
    seed : MNIST only: which images are sampled

    Returns
    -------
    x : np.ndarray n × pixels, float64, rows of unit length
    y : np.ndarray (n,), 0/1
    """
    if dataset == "digits":
        from sklearn.datasets import load_digits

        data = load_digits()
        keep = np.isin(data.target, classes)
        pixels, target = data.data[keep] / 16.0, data.target[keep]
    elif dataset == "mnist":
        pixels, target = _load_mnist(repo=repo, classes=classes, per_class=per_class, revision=revision, seed=seed)
    else:
        raise ValueError(f"dataset must be 'digits' or 'mnist', got {dataset!r}")
    norms = np.linalg.norm(pixels, axis=1, keepdims=True)
    return pixels / np.where(norms > 0, norms, 1.0), (target == classes[1]).astype(np.float64)


def _load_mnist(*, repo: str, classes, per_class: int, revision: str, seed: int):
    from datasets import load_dataset

    try:
        ds = load_dataset(repo, split="train", revision=revision)
    except Exception as err:  # offline without a cache: say what to fetch
        raise RuntimeError(
            f"could not load {repo} (revision {revision}): {err}. Fetch it once with network "
            f"access (python -c \"import datasets; datasets.load_dataset('{repo}', "
            f"revision='{revision}')\") or use fig2_dataset: digits"
        ) from err
    labels = np.asarray(ds["label"])
    rng = np.random.default_rng(seed)
    chosen = np.concatenate([rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in classes])
    chosen.sort()
    sub = ds.select(chosen.tolist())
    pixels = np.stack([np.asarray(img, dtype=np.float64).reshape(-1) for img in sub["image"]]) / 255.0
    return pixels, labels[chosen]


def _layer_curves(reps: list, labels: np.ndarray, taus: np.ndarray) -> dict:
    out = {}
    for name, rep in reps:
        curves = run_curves(rep, labels, taus)
        per_run = auc(curves, labels, taus)
        # each run's AUC beside the mean (Fig 7's ordering is tested run by run, prh.stats.sign_flip)
        out[name] = {"curve": mean_se(curves), "auc": mean_se(per_run[:, None]), "auc_runs": per_run.tolist()}
    return out


def run_emergence(*, x, y, runs: int = 5, fig2_epochs: int = 1000, fig7_width: int = 128,
                  lr: float = 1e-3, batch_size: int = 64, max_epochs: int = 300, patience: int = 10,
                  min_improvement: float = 0.05, min_delta: float = 1e-4, num_taus: int = 201, spectrum_points: int = 40,
                  seed: int = 0, device: str = "cpu") -> tuple[dict, dict]:
    """Fig 2 (shuffled labels, width = input) and Fig 7 (true labels, width ``fig7_width``).

    Parameters
    ----------
    x, y : from :func:`load_binary_digits`
    runs : independent runs (own shuffle and initialisation); the spectra of Fig 2
        are shown for run 0, the curves averaged
    fig2_epochs : epochs on the shuffled labels (the paper: 1000, no early stop)
    fig7_width, max_epochs, patience, min_improvement, min_delta : Fig 7's network and
        stopping rule (``train_mlp``)
    lr, batch_size : Adam step size and batch size (the paper: 0.001, 64)
    num_taus : thresholds on [0, √n]; spectrum_points : leading indices kept for Fig 2
    device : where the networks train ("auto": CUDA if present; MNIST wants a GPU)

    Returns
    -------
    fig2, fig7 : dicts ready for JSON (curves as mean/se over runs, AUC per panel or layer)
    """
    x = np.asarray(x, dtype=np.float64)
    y01 = np.asarray(y, dtype=np.float64)
    n, m = x.shape
    taus = tau_grid(n=n, num=num_taus)
    rng = np.random.default_rng(seed)
    shuffled01 = np.stack([rng.permutation(y01) for _ in range(runs)])
    true_pm = np.broadcast_to(2 * y01 - 1, (runs, n))
    shuffled_pm = 2 * shuffled01 - 1
    xs = np.broadcast_to(x, (runs, n, m))

    # Fig 2: train on the shuffled labels, look at the last hidden layer
    params0 = init_mlp(runs=runs, sizes=[m, m, m, m, 1], seed=seed)
    trained, info2 = train_mlp(params0, x=xs, y=shuffled01, loss="bce", lr=lr, batch_size=batch_size,
                               max_epochs=fig2_epochs, patience=0, seed=seed, device=device,
                               desc="fig2 shuffled")
    before, after = hidden_layers(params0, xs)[-1], hidden_layers(trained, xs)[-1]
    panels = {
        "input_true": (xs, true_pm),
        "input_shuffled": (xs, shuffled_pm),
        "init_shuffled": (before, shuffled_pm),
        "trained_shuffled": (after, shuffled_pm),
    }
    fig2 = {"taus": taus.tolist(), "n": n, "width": m, "panels": {}}
    for name, (rep, labels) in panels.items():
        sigma, proj2 = label_spectrum(rep[0], labels[0])
        curves = run_curves(rep, labels, taus)
        fig2["panels"][name] = {
            "sigma": sigma[:spectrum_points].tolist(),
            "proj2": proj2[:spectrum_points].tolist(),
            "curve": mean_se(curves),
            "auc": auc(curves, labels, taus).tolist(),
        }
    fig2["training"] = {"epochs": fig2_epochs, "final_loss": info2["final_loss"],
                        "chance_loss": float(np.log(2))}

    # Fig 7: true labels, every hidden layer before and after training
    params0 = init_mlp(runs=runs, sizes=[m, fig7_width, fig7_width, fig7_width, 1], seed=seed + 1)
    trained, info7 = train_mlp(params0, x=xs, y=np.broadcast_to(y01, (runs, n)), loss="bce", lr=lr,
                               batch_size=batch_size, max_epochs=max_epochs, patience=patience,
                               min_improvement=min_improvement, min_delta=min_delta, seed=seed + 1, device=device,
                               desc="fig7 layers")
    names = ["input"] + [f"hidden{i + 1}" for i in range(3)]
    fig7 = {
        "taus": taus.tolist(), "n": n, "width": fig7_width, "layers": names,
        "init": _layer_curves(list(zip(names, [xs] + hidden_layers(params0, xs))), true_pm, taus),
        "trained": _layer_curves(list(zip(names, [xs] + hidden_layers(trained, xs))), true_pm, taus),
        "training": {k: info7[k] for k in ("epochs", "converged", "final_loss")},
    }
    return fig2, fig7
