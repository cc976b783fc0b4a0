"""Consistency of the alignment metrics (PRH appendix B, Figs 12-14).

* Vision-vision (Fig 12): every metric of ``SUPPORTED_METRICS`` scores every pair
  of vision models, at the full set (one ``prh align`` JSON per metric) and at
  smaller batch sizes (the first ``bsz`` items, ``alignment_tables(n_items=bsz)``).
  Each (metric, bsz) variant gives a vector of scores over the model pairs i < j
  (upper triangle, diagonal excluded); Fig 12 is the Spearman rank correlation of
  every two variants, with p-values.
* Cross-modal (Figs 13-14): for each metric, the language-vision alignment against
  the LM's 1 - bits-per-byte, as Fig 3: per vision family the mean alignment per LM
  and its Pearson / Spearman r with 1 - bpb; pooled over all (LM, vision) pairs.

    prh run-metric-agreement \\
        --vision-alignments results/alignment/shapes_vision/{mutual_knn,cka,...}/zoo_vision__zoo_vision.json \\
        --vision-names resnet_xs_sup vit_xs_sup ... --vision-features f/resnet_xs_sup.safetensors ... \\
        --batch-sizes 500 \\
        --cross-alignments results/alignment/shapes_eval/{mutual_knn,cka,...}/zoo_language__zoo_vision.json \\
        --language results/experiments/zoo/language.json --families '{"resnet_xs_sup": "supervised"}' \\
        --topk 10 --quantile 0.95 --cca-dim 10 --metric-agreement metric_agreement.json \\
        --cross-metrics cross_metrics.json --metrics metrics.json --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from prh.io import add_path_options, json_object, named_paths, read_alignment, write_json
from prh.studies.convergence.run import correlations, language_vision
from prh.studies.metric_agreement.locality import lm_scores

__all__ = ["OUTPUTS", "variant_label", "upper_triangle", "spearman_matrix", "vision_variants", "cross_metric",
           "run_metric_agreement", "main"]

# the files run-metric-agreement writes, by name: one --<name> PATH option each
OUTPUTS = ("metric_agreement", "cross_metrics", "metrics")


def variant_label(metric: str, bsz: int) -> str:
    """Row / column label of one variant, e.g. ``mutual_knn (bsz=1000)``."""
    return f"{metric} (bsz={bsz})"


def upper_triangle(scores) -> np.ndarray:
    """Scores of the pairs i < j of a square model × model matrix, row by row (diagonal excluded)."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1] or scores.shape[0] < 2:
        raise ValueError(f"a vision-vision score matrix must be square with >= 2 models, got shape {scores.shape}")
    return scores[np.triu_indices(len(scores), k=1)]


def spearman_matrix(vectors: list) -> tuple[np.ndarray, np.ndarray]:
    """Spearman ρ and two-sided p of every two score vectors (V vectors of P pairs each).

    ρ_ab = Pearson correlation of the ranks of v_a and v_b (ties: average ranks), as
    ``scipy.stats.spearmanr``; the matrix is symmetric with ρ_aa = 1, p_aa = 0. A
    constant vector or one with NaN gives NaN.
    """
    vecs = [np.asarray(v, dtype=float) for v in vectors]
    if len({len(v) for v in vecs}) != 1 or len(vecs[0]) < 3:
        raise ValueError(f"score vectors must share one length >= 3, got lengths {[len(v) for v in vecs]}")
    n = len(vecs)
    rho, p = np.eye(n), np.zeros((n, n))
    for a in range(n):
        for b in range(a + 1, n):
            if np.ptp(vecs[a]) == 0 or np.ptp(vecs[b]) == 0 or not np.isfinite(vecs[a]).all() \
                    or not np.isfinite(vecs[b]).all():
                r = pv = float("nan")
            else:
                res = stats.spearmanr(vecs[a], vecs[b])
                r, pv = float(res.statistic), float(res.pvalue)
            rho[a, b] = rho[b, a] = r
            p[a, b] = p[b, a] = pv
    return rho, p


def _reorder_square(table: dict, names: list[str], source: str) -> np.ndarray:
    if table["x_names"] != table["y_names"] or sorted(table["x_names"]) != sorted(names):
        raise ValueError(f"{source} must be a vision__vision table over --vision-names {names}, "
                         f"got x={table['x_names']} y={table['y_names']}")
    idx = [table["x_names"].index(n) for n in names]
    return np.asarray(table["scores"], dtype=float)[np.ix_(idx, idx)]


def _check_settings(settings: dict, source: str, **want) -> None:
    bad = {k: (settings.get(k), v) for k, v in want.items() if settings.get(k) != v}
    if bad:
        raise ValueError(f"{source} was computed with other settings than asked for (file, asked): {bad}; "
                         "recompute it or pass the same --topk/--quantile/--cca-dim")


def vision_variants(*, vision_alignments: list[str], vision_names: list[str], vision_features: list[str],
                    batch_sizes: list[int], topk: int = 10, quantile: float = 0.95, cca_dim: int = 10,
                    threads: int | None = None, device: str = "cpu") -> dict:
    """Fig 12: every (metric, bsz) variant's pair scores and the Spearman matrix between them.

    The full-set variant of each metric is read from its JSON; each smaller ``bsz`` is
    computed with ``alignment_tables(metrics, n_items=bsz)`` on ``vision_features``, every
    metric in one pass (a variant's ``seconds`` is that pass's wall time, shared by its metrics).
    Variants are ordered metric by metric (the JSON order), full set first, then bsz
    descending.

    Returns
    -------
    dict: ``settings``, ``names``, ``labels``, ``variants`` ([{label, metric, bsz, source,
    seconds}]), ``pair_scores`` {label: upper triangle}, ``spearman``, ``p_value`` (V × V),
    ``summary`` (min / median / max off-diagonal ρ, max off-diagonal p).
    """
    from prh.metrics.engine import alignment_tables

    if len(vision_names) != len(vision_features):
        raise ValueError("--vision-names and --vision-features must be lists of equal length")
    tables = [(path, read_alignment(path)) for path in vision_alignments]
    metrics = [t["settings"]["metric"] for _, t in tables]
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"--vision-alignments must hold one JSON per metric, got metrics {metrics}")
    sizes = {t["settings"]["n"] for _, t in tables}
    if len(sizes) != 1:
        raise ValueError(f"--vision-alignments were computed on different item counts {sorted(sizes)}")
    n_full = sizes.pop()
    bad = [b for b in batch_sizes if not 1 <= b < n_full]
    if bad or len(set(batch_sizes)) != len(batch_sizes):
        raise ValueError(f"--batch-sizes must be distinct and below the full N={n_full} (read from the JSONs), "
                         f"got {batch_sizes}")
    # every metric of one batch size in one pass over the features (alignment_tables)
    small, seconds = {}, {}
    for bsz in sorted(batch_sizes, reverse=True):
        start = time.perf_counter()
        small[bsz] = alignment_tables(metrics, x_names=vision_names, x_features=vision_features, topk=topk,
                                      quantile=quantile, cca_dim=cca_dim, n_items=bsz, threads=threads, device=device)
        seconds[bsz] = time.perf_counter() - start
    variants, vectors = [], []
    for (path, table), metric in zip(tables, metrics):
        _check_settings(table["settings"], path, topk=topk, quantile=quantile, cca_dim=cca_dim)
        variants.append({"label": variant_label(metric, n_full), "metric": metric, "bsz": n_full,
                         "source": str(path), "seconds": None})
        vectors.append(upper_triangle(_reorder_square(table, vision_names, path)))
        for bsz in sorted(batch_sizes, reverse=True):
            variants.append({"label": variant_label(metric, bsz), "metric": metric, "bsz": bsz,
                             "source": "computed", "seconds": seconds[bsz]})
            vectors.append(upper_triangle(small[bsz][metric]["scores"]))
    rho, p = spearman_matrix(vectors)
    off = ~np.eye(len(vectors), dtype=bool)
    summary = {"min_spearman": float(np.nanmin(rho[off])), "median_spearman": float(np.nanmedian(rho[off])),
               "max_spearman": float(np.nanmax(rho[off])), "max_p": float(np.nanmax(p[off])),
               "p_at_min": float(p[off][np.nanargmin(rho[off])])}  # the two-sided p of the least-agreeing pair
    labels = [v["label"] for v in variants]
    return {"settings": {"n_full": n_full, "batch_sizes": sorted(batch_sizes, reverse=True), "topk": topk,
                         "quantile": quantile, "cca_dim": cca_dim, "n_models": len(vision_names),
                         "n_pairs": len(vectors[0])},
            "names": list(vision_names), "labels": labels, "variants": variants,
            "pair_scores": dict(zip(labels, vectors)), "spearman": rho, "p_value": p, "summary": summary}


def cross_metric(cross: dict, *, lm_score: dict[str, float], families: dict[str, str]) -> dict:
    """Figs 13-14, one metric: alignment of each (LM, vision) pair against the LM's 1 - bpb.

    Per vision family f and LM l (LMs ascending by 1 - bpb): m_f(l) = mean over the
    family's vision models of the alignment, and Pearson / Spearman r of (1 - bpb, m_f)
    over the LMs. Pooled: ``convergence.language_vision`` over every (LM, vision) pair.
    """
    bpb = {m: 1.0 - s for m, s in lm_score.items()}
    lv = language_vision(cross=cross, bpb=bpb, families=families)
    lms = sorted({p["language"] for p in lv["points"]}, key=lambda n: (lm_score[n], n))
    x = [lm_score[n] for n in lms]
    fams = {}
    for fam in dict.fromkeys(families.get(v, v) for v in cross["y_names"]):
        means = [float(np.mean([p["alignment"] for p in lv["points"] if p["family"] == fam and p["language"] == lm]))
                 for lm in lms]
        fams[fam] = {"mean_alignment": means, "vision": [v for v in cross["y_names"] if families.get(v, v) == fam],
                     **correlations(x, means)}
    return {"settings": cross["settings"], "lms": [{"name": n, "lm_score": lm_score[n]} for n in lms],
            "families": fams, "pooled": lv["pooled"], "skipped_no_bpb": lv["skipped_no_bpb"]}


def run_metric_agreement(*, vision_alignments: list[str], vision_names: list[str], vision_features: list[str],
                         batch_sizes: list[int], cross_alignments: list[str], language: str, families: dict,
                         out: dict, topk: int = 10, quantile: float = 0.95, cca_dim: int = 10,
                         threads: int | None = None, device: str = "cpu") -> dict:
    """Figs 12-14 numbers: writes ``out``'s metric_agreement, cross_metrics and metrics JSON files (``OUTPUTS``).

    Returns the metrics: Fig 12's min / median off-diagonal Spearman (and max p), and per
    metric the pooled cross-modal Spearman r and p of alignment against 1 - bpb.
    """
    out = named_paths(out, OUTPUTS, command="run-metric-agreement")
    vision = vision_variants(vision_alignments=vision_alignments, vision_names=vision_names,
                             vision_features=vision_features, batch_sizes=batch_sizes, topk=topk,
                             quantile=quantile, cca_dim=cca_dim, threads=threads, device=device)
    score = lm_scores(language)
    per_metric = {}
    for path in cross_alignments:
        cross = read_alignment(path)
        metric = cross["settings"]["metric"]
        if metric in per_metric:
            raise ValueError(f"--cross-alignments must hold one JSON per metric; {metric} appears twice")
        _check_settings(cross["settings"], path, topk=topk, quantile=quantile, cca_dim=cca_dim)
        per_metric[metric] = {"source": str(path), **cross_metric(cross, lm_score=score, families=families)}
    write_json(out["metric_agreement"], vision)
    write_json(out["cross_metrics"], {"metrics": list(per_metric), "per_metric": per_metric})
    metrics = {"metric_agreement": {k: vision["summary"][k] for k in ("min_spearman", "median_spearman", "max_p", "p_at_min")},
               "cross_modal": {m: {"spearman_r": r["pooled"]["spearman_r"], "spearman_p": r["pooled"]["spearman_p"]}
                               for m, r in per_metric.items()}}
    write_json(out["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice
    from prh.studies.metric_agreement.design import AGREEMENT_CONFIG

    parser = argparse.ArgumentParser(prog="prh run-metric-agreement",
                                     description="PRH Figs 12-14: agreement of the alignment metrics.")
    parser.add_argument("--vision-alignments", nargs="+", required=True,
                        help="vision__vision alignment JSONs, one per metric (full item set)")
    parser.add_argument("--vision-names", nargs="+", required=True, help="vision model names")
    parser.add_argument("--vision-features", nargs="+", required=True, help="their vision-set feature files")
    parser.add_argument("--cross-alignments", nargs="+", required=True,
                        help="language__vision alignment JSONs, one per metric")
    parser.add_argument("--language", required=True, help="JSON with models.<m>.bpb (results/experiments/zoo/language.json)")
    parser.add_argument("--families", type=json_object, default="{}", help="JSON: vision model -> family")
    add_path_options(parser, OUTPUTS, help="{name} JSON written")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: leave as is)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    settings = add_slice(parser, AGREEMENT_CONFIG)  # the alignment tables' settings (as in the JSONs), the batch sizes
    args = parser.parse_args(argv)
    config = settings(args)
    print(run_metric_agreement(vision_alignments=args.vision_alignments, vision_names=args.vision_names,
                               vision_features=args.vision_features, **config["metric_agreement"],
                               cross_alignments=args.cross_alignments, language=args.language,
                               families=args.families, out=vars(args), **config["alignment"], threads=args.threads,
                               device=args.device))
