"""Cross-modal alignment over the neighbourhood size k (PRH appendix A, Fig 10).

CKNNA (appendix A eq. 16-18) restricts the kernel alignment of two models to the
pairs (i, j) that are k-nearest neighbours in both; k = N - 1 keeps every pair.
For each k the engine's ``alignment_table("cknna", topk=k)`` scores every
language model against every vision model (best layer pair); the trends over the
language models, ordered by 1 - bits-per-byte, are then centred on the weakest
LM and standardised per vision model (``locality_trends``), so that curves of
different k can be compared on one axis.

At k = N - 1 the mask α(i, j) = 1[i ≠ j] is every off-diagonal pair and HSIC₁
ignores the diagonal, so CKNNA *is* unbiased CKA (Song et al. 2012) — not the
biased CKA of eq. 14 that the caption names. The engine's sparse CKNNA holds
La × N × k × k tensors per model pair (N = 1024, k = 1023: about 9 GB per layer
in float64), so by default that column is computed with
``alignment_table("unbiased_cka")``; tests/test_locality.py pins the identity
against the engine's cknna at small N.

    prh run-locality --x-names gpt2_m_0 gpt2_l_400 --x-features f/gpt2_m_0.safetensors f/gpt2_l_400.safetensors \\
        --y-names resnet_xs_sup vit_xs_sup --y-features f/resnet_xs_sup.safetensors f/vit_xs_sup.safetensors \\
        --locality-ks 10 20 50 100 200 500 N-1 --language results/experiments/zoo/language.json \\
        --families '{"resnet_xs_sup": "supervised", "vit_xs_sup": "supervised"}' \\
        --quantile 0.95 --locality locality.json --metrics locality_metrics.json --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from prh.io import add_path_options, json_object, named_paths, read_json, write_json
from prh.studies.convergence.run import correlations

__all__ = ["OUTPUTS", "FULL_K", "n_items_of", "resolve_ks", "locality_table", "locality_trends", "lm_scores",
           "run_locality", "main"]

OUTPUTS = ("locality", "metrics")  # the files run-locality writes, by name: one --<name> PATH option each
# Spellings of k = N - 1 (every other item is a neighbour: the CKA-like end of the range).
FULL_K = ("-1", "N-1", "n-1")


def n_items_of(path: str) -> int:
    """Number of items N of a ``.safetensors`` feature file, read from its header only."""
    from prh.io import open_features

    with open_features(path) as f:
        return int(f.get_slice("feats").get_shape()[0])


def resolve_ks(ks, n: int) -> list[int]:
    """Neighbourhood sizes as sorted ints: -1 or "N-1" becomes n - 1; each must be in [2, n - 1].

    Parameters
    ----------
    ks : list of int or str (e.g. ``[10, 50, "N-1"]``)
    n : number of items N
    """
    out = []
    for k in ks:
        text = str(k).strip()
        if text in FULL_K:
            out.append(n - 1)
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"k={k!r} is not an integer or one of {FULL_K}") from None
        if not 2 <= value <= n - 1:
            raise ValueError(f"k={value} must be between 2 (CKNNA needs two neighbours) and N-1 = {n - 1}; "
                             "write N-1 for the CKA-like end")
        out.append(value)
    if not out or len(set(out)) != len(out):
        raise ValueError(f"ks must be non-empty and distinct once N-1 is resolved (N={n}), got {list(ks)}")
    return sorted(out)


def locality_table(*, x_names: list[str], x_features: list[str], y_names: list[str], y_features: list[str],
                   ks: list, quantile: float = 0.95, n_items: int | None = None, device: str = "cpu",
                   threads: int | None = None, full_k_as_unbiased_cka: bool = True) -> dict:
    """CKNNA score matrices (x models × y models, best layer pair) for every k.

    Parameters
    ----------
    x_names, x_features : language models and their feature files (rows)
    y_names, y_features : vision models and their feature files on the same items (columns)
    ks : neighbourhood sizes; -1 or "N-1" means N - 1 (``resolve_ks``)
    quantile : outlier clamp of the engine
    n_items : use only the first n items of every file (None: all)
    device, threads : passed to the engine
    full_k_as_unbiased_cka : compute the k = N - 1 column with ``alignment_table("unbiased_cka")``,
        which equals CKNNA there (module docstring); False runs the engine's cknna at k = N - 1.

    Returns
    -------
    dict: ``settings`` (quantile, n, ks), ``x_names``, ``y_names``, ``tables`` — one per k,
    ascending: ``k``, ``metric`` (the engine metric that computed it), ``scores``,
    ``best_pairs``, ``seconds`` (wall time of that engine call).
    """
    from prh.metrics.engine import alignment_table

    for side, names, files in (("x", x_names, x_features), ("y", y_names, y_features)):
        if not names or len(names) != len(files):
            raise ValueError(f"--{side}-names and --{side}-features must be non-empty lists of equal length")
    n_file = n_items_of(x_features[0])
    if n_items is not None and not 1 <= n_items <= n_file:
        raise ValueError(f"n_items={n_items} must be between 1 and the {n_file} items of {x_features[0]}")
    n = n_items or n_file
    tables = []
    for k in resolve_ks(ks, n):
        metric = "unbiased_cka" if full_k_as_unbiased_cka and k == n - 1 else "cknna"
        start = time.perf_counter()
        table = alignment_table(metric, x_names=x_names, x_features=x_features, y_names=y_names,
                                y_features=y_features, topk=k, quantile=quantile, device=device,
                                threads=threads, n_items=n_items)
        tables.append({"k": k, "metric": metric, "scores": np.asarray(table["scores"]),
                       "best_pairs": table["best_pairs"], "seconds": time.perf_counter() - start})
    return {"settings": {"quantile": quantile, "n": n, "ks": [t["k"] for t in tables],
                         "full_k_as_unbiased_cka": full_k_as_unbiased_cka},
            "x_names": list(x_names), "y_names": list(y_names), "tables": tables}


def _standardise(scores: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """(s - s[0]) / std(s) per column (ddof 0); a constant column (std <= 1e-12 of its scale, which
    absorbs float noise) becomes NaN and its index is returned."""
    std = scores.std(axis=0)
    flat = ~(std > 1e-12 * np.maximum(1.0, np.abs(scores).max(axis=0)))
    out = (scores - scores[0]) / np.where(flat, 1.0, std)
    out[:, flat] = np.nan
    return out, [int(j) for j in np.flatnonzero(flat)]


def _column_mean(values: np.ndarray) -> list[float]:
    """Row means over the finite columns (NaN where a row has none)."""
    finite = np.isfinite(values)
    count = finite.sum(axis=1)
    total = np.where(finite, values, 0.0).sum(axis=1)
    return [float(t / c) if c else float("nan") for t, c in zip(total, count)]


def locality_trends(tables: dict, *, lm_score: dict[str, float], families: dict[str, str]) -> dict:
    """Fig 10: per k, the trend of alignment over LMs ordered by 1 - bpb, centred and standardised.

    Reading of appendix A. The caption says "we center alignment score to the
    smallest language model and divide the total trend by the standard deviation";
    the text says "center the scores to the smallest vision model" (taken as a slip:
    the x axis of the figure is the LMs). "Each line represents the average of all
    LLM models for a specific k" is read as: one line per k, drawn over the LMs,
    averaged over the vision models of a panel's family. So, for k and vision model v,
    with a_l the alignment of LM l (LMs sorted by 1 - bpb, l = 0 the weakest)::

        z_l(v) = (a_l(v) - a_0(v)) / std_l a_l(v)       (population std over the LMs)

    z_0 = 0 and std_l z_l = 1 for every v; a constant column (std ≤ 1e-12 of its scale)
    gives NaN (listed in ``degenerate``).
    A panel's line is mean_v z_l(v) over the family's vision models (finite ones),
    and "all" over every vision model. LMs without 1 - bpb (masked LMs) are skipped.
    Per k, also: the mean raw alignment over all (LM, vision) cells and the Pearson /
    Spearman correlation of 1 - bpb with m_l = mean_v a_l(v), the raw mean per LM
    ("alignment becomes more pronounced as k decreases" ⇔ larger r at small k),
    and the same correlation per family.

    Parameters
    ----------
    tables : ``locality_table`` result
    lm_score : {language model: 1 - bpb}
    families : {vision model: family}; a model not listed is its own family

    Returns
    -------
    dict: ``lms`` ([{name, lm_score}] ascending), ``weakest_lm``, ``skipped_no_bpb``,
    ``vision``, ``families``, ``family_order``, ``per_k`` (per k: ``k``, ``metric``,
    ``raw`` and ``standardised`` {vision: [per LM]}, ``family_mean`` {family or "all": [per LM]},
    ``degenerate``, ``mean_alignment``, ``alignment_vs_lm`` (correlations of m_l),
    ``family_vs_lm`` {family: correlations of the family's raw mean per LM}, ``seconds``).
    """
    x_names, y_names = tables["x_names"], tables["y_names"]
    lms = sorted((n for n in x_names if n in lm_score), key=lambda n: (lm_score[n], n))
    if len(lms) < 2:
        raise ValueError(f"at least two language models need a 1 - bpb score, got {lms} of {x_names}: "
                         "pass the zoo language.json (masked LMs have no bpb)")
    rows = [x_names.index(n) for n in lms]
    fam = {v: families.get(v, v) for v in y_names}
    order = list(dict.fromkeys(fam[v] for v in y_names))
    scores_x = [lm_score[n] for n in lms]
    per_k = []
    for table in tables["tables"]:
        raw = np.asarray(table["scores"], dtype=float)[rows]
        z, flat = _standardise(raw)
        members = {f: [j for j, v in enumerate(y_names) if fam[v] == f] for f in order}
        family_mean = {f: _column_mean(z[:, cols]) for f, cols in members.items()}
        family_mean["all"] = _column_mean(z)
        per_k.append({
            "k": table["k"], "metric": table["metric"], "seconds": table.get("seconds"),
            "raw": {v: raw[:, j].tolist() for j, v in enumerate(y_names)},
            "standardised": {v: z[:, j].tolist() for j, v in enumerate(y_names)},
            "family_mean": family_mean,
            "degenerate": [y_names[j] for j in flat],
            "mean_alignment": float(raw.mean()),
            "alignment_vs_lm": correlations(scores_x, raw.mean(axis=1)),
            "family_vs_lm": {f: correlations(scores_x, raw[:, cols].mean(axis=1)) for f, cols in members.items()},
        })
    return {"lms": [{"name": n, "lm_score": lm_score[n]} for n in lms], "weakest_lm": lms[0],
            "skipped_no_bpb": [n for n in x_names if n not in lm_score], "vision": list(y_names),
            "families": fam, "family_order": order, "per_k": per_k}


def lm_scores(language: str) -> dict[str, float]:
    """{LM: 1 - bpb} from the zoo language JSON (``models.<m>.bpb``; null for masked LMs)."""
    models = read_json(language).get("models")
    if not isinstance(models, dict):
        raise ValueError(f"{language} has no 'models' object: pass results/experiments/zoo/language.json")
    return {m: 1.0 - v["bpb"] for m, v in models.items() if v.get("bpb") is not None}


def run_locality(*, x_names: list[str], x_features: list[str], y_names: list[str], y_features: list[str],
                 ks: list, language: str, families: dict, out: dict, quantile: float = 0.95,
                 n_items: int | None = None, threads: int | None = None, device: str = "cpu",
                 full_k_as_unbiased_cka: bool = True) -> dict:
    """Fig 10 numbers: writes ``out["locality"]`` (tables and trends) and ``out["metrics"]`` (``OUTPUTS``).

    Returns the metrics: per k (key ``k<k>``) the Spearman r and p of 1 - bpb against the
    mean alignment per LM, and the mean alignment.
    """
    out = named_paths(out, OUTPUTS, command="run-locality")
    table = locality_table(x_names=x_names, x_features=x_features, y_names=y_names, y_features=y_features,
                           ks=ks, quantile=quantile, n_items=n_items, device=device, threads=threads,
                           full_k_as_unbiased_cka=full_k_as_unbiased_cka)
    trends = locality_trends(table, lm_score=lm_scores(language), families=families)
    write_json(out["locality"], {**table, **trends})
    n = table["settings"]["n"]
    metrics = {"locality": {f"k{t['k']}": {"full_k": t["k"] == n - 1, "mean_alignment": t["mean_alignment"],
                                           "spearman_r": t["alignment_vs_lm"]["spearman_r"],
                                           "spearman_p": t["alignment_vs_lm"]["spearman_p"]}
                            for t in trends["per_k"]}}
    write_json(out["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice
    from prh.studies.metric_agreement.design import LOCALITY_CONFIG

    parser = argparse.ArgumentParser(prog="prh run-locality", description="PRH Fig 10: cross-modal CKNNA over k.")
    parser.add_argument("--x-names", nargs="+", required=True, help="language model names")
    parser.add_argument("--x-features", nargs="+", required=True, help="their feature files (paired set), same order")
    parser.add_argument("--y-names", nargs="+", required=True, help="vision model names")
    parser.add_argument("--y-features", nargs="+", required=True, help="their feature files (paired set), same order")
    parser.add_argument("--language", required=True, help="JSON with models.<m>.bpb (results/experiments/zoo/language.json)")
    parser.add_argument("--families", type=json_object, default="{}", help="JSON: vision model -> family")
    parser.add_argument("--n-items", type=int, default=None, help="use only the first N items (default: all)")
    add_path_options(parser, OUTPUTS, help="{name} JSON written")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: leave as is)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--full-k-cknna", action="store_true",
                        help="run the engine's cknna at k=N-1 too (default: unbiased_cka, identical there and "
                             "far cheaper)")
    settings = add_slice(parser, LOCALITY_CONFIG)  # k of CKNNA (N-1: every other item), the clamp quantile
    args = parser.parse_args(argv)
    config = settings(args)
    print(run_locality(x_names=args.x_names, x_features=args.x_features, y_names=args.y_names,
                       y_features=args.y_features, ks=config["metric_agreement"]["locality_ks"], language=args.language,
                       families=args.families, out=vars(args), **config["alignment"], n_items=args.n_items, threads=args.threads,
                       device=args.device, full_k_as_unbiased_cka=not args.full_k_cknna))
