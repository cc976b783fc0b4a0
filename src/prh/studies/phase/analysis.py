"""``prh run-phase-analysis``: pairs, Table 1, the claims' statistics and verdicts (seed 000).

Reads every model's NTK job output (``prh run-phase-model``) and per-layer features, and writes
``--pairs`` (pairs.csv: one row per model pair: S literal and centred, retrieval, mutual k-NN,
feature CKA, AGOP ratio, ΔNTK, phase), ``--model-table`` (models.csv: one row per model),
``--table1`` (table1.csv: per family) and ``--metrics`` (metrics.json: per claim statistic,
p-value, verdict, ``claims.py`` holds the rules; and the config it was given, whose thresholds
the figures draw).

    prh run-phase-analysis --models '{"resnet_xs_sup": {"modality": "vision", "group": "CNN",
        "ntk": "results/experiments/phase/models/resnet_xs_sup.json",
        "features": "results/features/shapes_eval/resnet_xs_sup.safetensors"}, ...}' \\
        --config '{"phase": {...}}' --pairs pairs.csv --model-table models.csv --table1 table1.csv --metrics metrics.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import time
from pathlib import Path

import numpy as np

from prh.io import add_path_options, atomic_path, load_features, named_paths, read_json, write_json
from prh.studies.phase import ntk as nt
from prh.studies.phase.alignment import (
    linear_cka_last,
    mutual_knn_last,
    pair_retrieval,
)
from prh.studies.phase.claims import evaluate_claims
from prh.studies.phase.spectra import layer_summary
from prh.errors import UsageError

__all__ = ["OUTPUTS", "phase_of", "model_rows", "pair_rows", "table1", "write_csv", "analyse", "main"]

# the files run-phase-analysis writes, by name: one --<name> PATH option each (model_table: models.csv)
OUTPUTS = ("pairs", "model_table", "table1", "metrics")


def phase_of(s: float, *, chaotic: float, lazy: float) -> str:
    """Seed 000's phases: chaotic S < 0.5, optimal 0.5 ≤ S < 0.9, lazy S ≥ 0.9."""
    return "chaotic" if s < chaotic else ("lazy" if s >= lazy else "optimal")


def write_csv(path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def model_rows(models: dict, *, k_max: int) -> tuple[list[dict], dict]:
    """Per-model numbers and the per-model arrays (Θ states, last-layer features)."""
    rows, arrays = [], {}
    for name, spec in models.items():
        res = read_json(spec["ntk"])
        theta = np.load(Path(spec["ntk"]).with_suffix(".npy"), allow_pickle=False)
        feats, meta = load_features(spec["features"], with_meta=True)
        dims = meta.get("layer_dims")
        last = feats[:, -1, : dims[-1]] if dims else feats[:, -1]
        arrays[name] = {"states": nt.ntk_states(theta), "feats": last.double().numpy()}
        rows.append({"model": name, "modality": spec["modality"], "group": spec["group"],
                     "n_params": res["n_params"], "lambda1": res["agop"]["lambda1"],
                     "anisotropy": res["agop"]["anisotropy"], "stability": res["stability"],
                     "stability_centred": res["stability_centred"], "sketch_error": res["sketch_error"],
                     **layer_summary(feats.numpy(), layer_dims=dims, k_max=k_max)})
    return rows, arrays


def pair_rows(rows: list[dict], arrays: dict, *, config: dict, seed: int) -> list[dict]:
    """Every unordered model pair (cross-modal first as vision × language)."""
    by = {r["model"]: r for r in rows}
    n = len(next(iter(arrays.values()))["feats"])
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * config["test_fraction"]))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    rules = config["rules"]
    out = []
    for a, b in itertools.combinations(by, 2):
        ra, rb = by[a], by[b]
        if ra["modality"] == "language" and rb["modality"] == "vision":
            a, b, ra, rb = b, a, rb, ra
        kind = "cross" if ra["modality"] != rb["modality"] else ra["modality"]
        fa, fb = arrays[a]["feats"], arrays[b]["feats"]
        s_lit = nt.state_similarity(arrays[a]["states"]["literal"], arrays[b]["states"]["literal"])
        s_cen = nt.state_similarity(arrays[a]["states"]["centred"], arrays[b]["states"]["centred"])
        ret = pair_retrieval(fa, fb, train=train, test=test)
        lam = sorted([ra["lambda1"], rb["lambda1"]])
        ratio = lam[1] / lam[0] if lam[0] > 0 else math.inf
        d_ntk = abs(ra["stability"] - rb["stability"])
        out.append({
            "a": a, "b": b, "kind": kind, "group_a": ra["group"], "group_b": rb["group"],
            "s_literal": s_lit, "s_centred": s_cen, "phase": phase_of(s_lit, chaotic=rules["chaotic"], lazy=rules["lazy"]),
            "retrieval": ret["retrieval"], "retrieval_ab": ret["a_to_b"], "retrieval_ba": ret["b_to_a"],
            "chance": ret["chance"], "mutual_knn": mutual_knn_last(fa, fb, topk=config["topk"], quantile=config["quantile"]),
            "feature_cka": linear_cka_last(fa, fb), "agop_ratio": ratio, "delta_ntk": d_ntk,
            "combined": d_ntk * math.log10(ratio), "log_params": math.log(ra["n_params"]) + math.log(rb["n_params"]),
        })
    return out


def table1(rows: list[dict], pairs: list[dict], *, config: dict) -> list[dict]:
    """Seed 000 Table 1 per family: mean cross-modal S, AGOP λ₁ range, compression, spectral decay, phase."""
    out = []
    for group in dict.fromkeys(r["group"] for r in rows):
        members = [r for r in rows if r["group"] == group]
        names = {r["model"] for r in members}
        cross = [p for p in pairs if p["kind"] == "cross" and (p["a"] in names or p["b"] in names)]
        s = float(np.mean([p["s_literal"] for p in cross])) if cross else float("nan")
        lam = [r["lambda1"] for r in members]
        stab = float(np.mean([r["stability"] for r in members]))
        out.append({
            "family": group, "modality": members[0]["modality"], "n_models": len(members),
            "avg_ntk_cross": s, "avg_ntk_cross_centred": float(np.mean([p["s_centred"] for p in cross])) if cross else float("nan"),
            "agop_lambda1_min": min(lam), "agop_lambda1_max": max(lam),
            "compression": float(np.mean([r["compression"] for r in members])),
            "spectral_decay": float(np.nanmean([r["spectral_decay"] for r in members])),
            "stability": stab, "phase": phase_of(s, chaotic=config["rules"]["chaotic"], lazy=config["rules"]["lazy"]),
        })
    return out


def analyse(*, models: dict, config: dict, out: dict, adaptive_lr: str | None = None, seed: int = 0) -> dict:
    """Pairs, Table 1 and the claims' verdicts of every model in ``models`` -> ``out``'s files (``OUTPUTS``)."""
    t0 = time.process_time()
    out = named_paths(out, OUTPUTS, command="run-phase-analysis")
    if not any(s["modality"] == "vision" for s in models.values()) or not any(
            s["modality"] == "language" for s in models.values()):
        raise UsageError("models must include at least one vision and one language model")
    rows, arrays = model_rows(models, k_max=config["spectral_k_max"])
    pairs = pair_rows(rows, arrays, config=config, seed=seed)
    t1 = table1(rows, pairs, config=config)
    lr = read_json(adaptive_lr) if adaptive_lr else None
    metrics = evaluate_claims(rows, pairs, config=config, adaptive_lr=lr, seed=seed)
    metrics["analysis_cpu_seconds"] = time.process_time() - t0
    metrics["config"] = config  # what it ran with: the figures draw its thresholds (rules)
    write_csv(out["model_table"], rows)
    write_csv(out["pairs"], pairs)
    write_csv(out["table1"], t1)
    write_json(out["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.io import json_object
    from prh.slices import add_slice
    from prh.studies.phase.design import SLICES

    p = argparse.ArgumentParser(prog="prh run-phase-analysis", description=analyse.__doc__.split("\n")[0])
    p.add_argument("--models", type=json_object, required=True,
                   help="name -> {modality, group, ntk (model job JSON), features (safetensors)}")
    p.add_argument("--adaptive-lr", default=None, help="adaptive_lr.json of `prh run-phase-adaptive-lr` (Table 2)")
    add_path_options(p, OUTPUTS, help="{name} written")
    p.add_argument("--seed", type=int, default=0)
    settings = add_slice(p, {"phase": SLICES["analysis"]})
    a = p.parse_args(argv)
    m = analyse(models=a.models, config=settings(a)["phase"], out=vars(a), adaptive_lr=a.adaptive_lr, seed=a.seed)
    print({k: v.get("verdict") for k, v in m["claims"].items()})
