"""Outlier weights per matrix (seed 001, Figs 2, 10, 11, 14).

For the entries w of one weight matrix (any tensor with >= 2 dims, flattened), with m the
median and σ_r = 1.4826 · median|w - m| (the MAD, scaled to equal σ for a Gaussian):

    outlier_fraction = mean(|w - m| > t σ_r)          (t = 6: ~2e-9 for Gaussian entries)
    excess_kurtosis  = E[(w - μ)^4] / σ^4 - 3          (0 for a Gaussian)
    max_ratio        = max|w - μ| / σ                   (~4.5-5.5 for 10^5-10^6 Gaussian entries)

A model is summarised by the median (and mean) of each statistic over its matrices. The
checkpoints compared (Fig 2): the packaged MiniLM, the same architecture at random init,
the offline zoo's vision models and caption GPT-2s (``results/models/<m>/model.safetensors``).

    prh run-bridge-outliers --models minilm=pkg:minilm scratch=init:minilm vit_xs_sup=results/models/vit_xs_sup \\
        --out results/experiments/bridge/outliers.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

__all__ = ["outlier_stats", "matrix_stats", "summarise", "checkpoint_matrices", "run_outliers", "main"]

STATS = ("outlier_fraction", "excess_kurtosis", "max_ratio")


def outlier_stats(w, *, threshold: float = 6.0) -> dict:
    """``outlier_fraction``, ``excess_kurtosis`` and ``max_ratio`` of the entries of ``w`` (module docstring)."""
    x = np.asarray(w, dtype=np.float64).ravel()
    if x.size < 8:
        raise ValueError(f"w has {x.size} entries; outlier statistics need at least 8")
    if threshold <= 0:
        raise ValueError(f"threshold={threshold} must be positive (robust standard deviations)")
    med = np.median(x)
    sigma_r = 1.4826 * np.median(np.abs(x - med))
    dev = x - x.mean()
    sd = dev.std()
    if sd == 0 or sigma_r == 0:  # constant (or mostly constant) matrix: no spread to speak of
        return {"outlier_fraction": float(np.mean(x != med)), "excess_kurtosis": 0.0, "max_ratio": 0.0,
                "n": int(x.size)}
    return {"outlier_fraction": float(np.mean(np.abs(x - med) > threshold * sigma_r)),
            "excess_kurtosis": float(np.mean(dev**4) / sd**4 - 3.0),
            "max_ratio": float(np.abs(dev).max() / sd), "n": int(x.size)}


def matrix_stats(tensors: dict, *, threshold: float = 6.0, min_size: int = 1024) -> dict:
    """``{name: outlier_stats}`` of every tensor with >= 2 dims and >= ``min_size`` entries."""
    out = {}
    for name, w in sorted(tensors.items()):
        w = np.asarray(w)
        if w.ndim >= 2 and w.size >= min_size:
            out[name] = outlier_stats(w, threshold=threshold)
    if not out:
        raise ValueError(f"no matrix of >= {min_size} entries among {len(tensors)} tensors; lower min_size")
    return out


def summarise(stats: dict) -> dict:
    """Median and mean over matrices of each statistic, and the number of matrices."""
    res = {"n_matrices": len(stats)}
    for key in STATS:
        vals = np.array([s[key] for s in stats.values()])
        res[f"median_{key}"], res[f"mean_{key}"] = float(np.median(vals)), float(np.mean(vals))
    return res


def checkpoint_matrices(spec: str) -> dict:
    """Weight tensors (numpy) of a checkpoint's transformer blocks or of a whole saved model.

    ``pkg:minilm`` (packaged, SHA-256 checked) and ``init:minilm`` (the same architecture at its
    random init, seed 0); ``hub:<repo>@<revision>`` and ``hubinit:<repo>@<revision>`` likewise for
    a hub language model (paper config); otherwise a directory with ``model.safetensors``.
    """
    kind, _, rest = spec.partition(":")
    if kind in ("pkg", "init", "hub", "hubinit") and rest:
        from prh.studies.bridge.model import load_backbone

        source, _, revision = rest.partition("@")
        init = "scratch" if kind in ("init", "hubinit") else "pretrained"
        blocks, _, _ = load_backbone(source, revision=revision or None, init=init)
        return {f"blocks.{k}": v.detach().numpy() for k, v in blocks.state_dict().items()}
    path = Path(spec) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: train the model first (snakemake {path})")
    from safetensors.numpy import load_file

    return load_file(str(path))


def run_outliers(*, models: dict[str, str], families: dict[str, str], out: str, threshold: float = 6.0,
                 min_size: int = 1024) -> dict:
    """Per model: family, per-matrix statistics and their summary; written to ``out``."""
    from prh.io import write_json

    if not models:
        raise ValueError("models is empty; give name=checkpoint pairs")
    res = {"settings": {"threshold": threshold, "min_size": min_size}, "models": {}}
    for name, spec in models.items():
        stats = matrix_stats(checkpoint_matrices(spec), threshold=threshold, min_size=min_size)
        res["models"][name] = {"family": families.get(name, "other"), "source": spec,
                               "summary": summarise(stats), "matrices": stats}
    write_json(out, res)
    return res


def main(argv: list[str] | None = None) -> None:
    from prh.io import json_object
    from prh.slices import add_slice
    from prh.studies.bridge.design import OUTLIERS_CONFIG

    p = argparse.ArgumentParser(prog="prh run-bridge-outliers", description="Outlier weights per matrix (seed 001 Fig 2).")
    p.add_argument("--models", nargs="+", required=True, help="name=checkpoint (pkg:minilm, init:minilm or a dir)")
    p.add_argument("--families", type=json_object, default="{}", help="JSON {name: family} for the figure")
    p.add_argument("--out", required=True)
    settings = add_slice(p, OUTLIERS_CONFIG)  # threshold, min_size
    args = p.parse_args(argv)
    if bad := [m for m in args.models if "=" not in m]:
        from prh.errors import UsageError

        raise UsageError(f"--models takes name=checkpoint, got {' '.join(bad)}")
    models = dict(m.split("=", 1) for m in args.models)
    res = run_outliers(models=models, families=args.families, out=args.out, **settings(args)["bridge.outliers"])
    for name, r in res["models"].items():
        print(f"{name}: median outlier fraction {r['summary']['median_outlier_fraction']:.2e}")
