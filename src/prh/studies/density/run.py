"""Caption density (PRH section 6, Figure 9): denser captions align better with vision?

For every density level d of a paired dataset's captions (offline: the shapes world's
six nested levels, from "an image with a green hexagon in it" to full coordinates;
paper: DCI's dense captions summarised to 5, 10, 20, 50, 100 words, plus the dense
caption itself), the language features of every language model at that level are
aligned with every vision model's features on the same images (best layer pair,
the alignment engine's metric). Per level:

* ``mean``: the mean alignment over all (language, vision) pairs;
* ``std``: the standard deviation over language models of each LM's mean alignment
  over vision models (PRH: "standard deviation measured over the language models");
* offline also the alignment of each LM's features with the world's ground-truth
  kernel (``world_mean``, ``world_std``): does a denser caption carry more of the scene?

The trend is measured, not eyeballed: the least-squares slope of ``mean`` against
log2(mean words per caption), Spearman r (and p) of level vs ``mean`` (n = levels)
and over all (level, pair) points, and how many LMs align better at the densest
than at the sparsest level.

    prh run-density --captions results/data/shapes_eval/captions.jsonl \\
        --language-names gpt2_s_100 ... --language-features \\
        results/features/shapes_eval/density0/gpt2_s_100.safetensors ... (level-major: all LMs of level 0, ...) \\
        --vision-names resnet_xs_sup ... --vision-features results/features/shapes_eval/resnet_xs_sup.safetensors ... \\
        --scenes results/data/shapes_eval/scenes.jsonl --density density.json --metrics metrics.json --metric mutual_knn
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from prh.io import add_path_options, named_paths, read_jsonl, write_json
from prh.metrics import alignment_table
from prh.studies.convergence.run import correlations, platonic_scores
from prh.errors import UsageError

__all__ = ["OUTPUTS", "level_word_counts", "level_summary", "density_trend", "run_density", "main"]

OUTPUTS = ("density", "metrics")  # the files run-density writes, by name: one --<name> PATH option each


def level_word_counts(captions: str | Path | list[dict]) -> tuple[list[float], list[str]]:
    """Mean words per caption at each density level of a ``captions.jsonl`` (or its records)
    with ``texts`` lists, and the level labels (``num_words`` of summarised captions when
    recorded, else the index)."""
    records = captions if isinstance(captions, list) else read_jsonl(captions, keys=("texts",))
    if not records or not isinstance(records[0].get("texts"), list):
        raise UsageError(f"{captions}: each record needs a `texts` list (one caption per density level); "
                         "the shapes datasets and `prh summarise-captions` write it")
    n_levels = len(records[0]["texts"])
    if any(len(r["texts"]) != n_levels for r in records):
        raise ValueError(f"{captions}: records have different numbers of density levels")
    words = [float(np.mean([len(r["texts"][i].split()) for r in records])) for i in range(n_levels)]
    num_words = records[0].get("num_words")
    labels = ([f"{w} words" for w in num_words] + ["dense"] if num_words and len(num_words) == n_levels - 1
              else [f"level {i}" for i in range(n_levels)])
    return words, labels


def level_summary(scores: np.ndarray) -> dict:
    """Mean over all (language, vision) pairs and std over LMs of each LM's mean (rows = LMs)."""
    scores = np.asarray(scores, dtype=float)
    per_lm = scores.mean(axis=1)
    return {"mean": float(scores.mean()), "std": float(per_lm.std(ddof=1)) if len(per_lm) > 1 else float("nan"),
            "per_language": per_lm.tolist()}


def density_trend(*, words: list[float], tables: list[np.ndarray]) -> dict:
    """Strength of the density trend over levels (``tables[d]``: LMs x vision models).

    slope: least squares of the level mean on log2(words); spearman over the n_levels
    means and over all (level, pair) points; lm_increase: LMs whose mean alignment at
    the densest level exceeds that at the sparsest.
    """
    if len(words) != len(tables) or len(words) < 2:
        raise ValueError(f"need >= 2 levels with one table each, got {len(words)} levels and {len(tables)} tables")
    means = [float(np.mean(t)) for t in tables]
    x = np.log2(np.asarray(words, dtype=float))
    slope = float(np.polyfit(x, means, 1)[0]) if np.ptp(x) > 0 else float("nan")
    levels = np.arange(len(tables))
    by_level = (stats.spearmanr(levels, means) if len(tables) >= 3 and np.ptp(means) > 0
                else None)
    pooled = correlations(np.repeat(levels, [np.size(t) for t in tables]),
                           np.concatenate([np.ravel(t) for t in tables]))
    first, last = np.asarray(tables[0]).mean(axis=1), np.asarray(tables[-1]).mean(axis=1)
    return {"slope_per_doubling": slope,
            "spearman_r": float(by_level.statistic) if by_level is not None else float("nan"),
            "spearman_p": float(by_level.pvalue) if by_level is not None else float("nan"),
            "n_levels": len(tables), "pooled": pooled,
            "lm_increase": int(np.sum(last > first)), "n_language": int(len(first))}


def run_density(*, captions: str, language_names: list[str], language_features: list[str],
                vision_names: list[str], vision_features: list[str], out: dict, scenes: str | None = None,
                levels: list[int] | None = None, metric: str = "mutual_knn", topk: int = 10, quantile: float = 0.95, cca_dim: int = 10,
                threads: int | None = None, device: str = "cpu") -> dict:
    """Figure 9 numbers: writes ``out["density"]`` and ``out["metrics"]`` (``OUTPUTS``); returns the metrics.

    ``language_features`` is level-major: the first level's file for every name in
    ``language_names``, then the next level's, and so on; ``levels`` names the density
    levels (indices into each record's ``texts``) the files were extracted at (default: all).
    """
    out = named_paths(out, OUTPUTS, command="run-density")
    records = read_jsonl(captions, keys=("texts",))
    all_words, all_labels = level_word_counts(records)
    levels = list(range(len(all_words))) if levels is None else list(levels)
    bad = [lv for lv in levels if not 0 <= lv < len(all_words)]
    if bad or len(set(levels)) != len(levels) or levels != sorted(levels):
        raise ValueError(f"levels {levels} must be increasing distinct indices into the {len(all_words)} "
                         f"caption levels of {captions}")
    words, labels = [all_words[lv] for lv in levels], [all_labels[lv] for lv in levels]
    n_lang = len(language_names)
    if n_lang == 0 or len(language_features) != n_lang * len(words):
        raise ValueError(f"{len(words)} density levels of {captions} are used and {n_lang} language models are named, so "
                         f"--language-features needs {n_lang * len(words)} files (level-major), got {len(language_features)}")
    n_items = len(records)
    world_scenes = [r["scene"] for r in read_jsonl(scenes, keys=("scene",))][:n_items] if scenes else None
    # one table for every (LM, level) row against the vision models: each vision model's
    # states are built once, not once per level; summaries of the first n captions
    # (`max_items`) align with the first n images' features
    table = alignment_table(metric, x_names=[f"{name}@{level}" for level in levels for name in language_names],
                            x_features=language_features, y_names=vision_names, y_features=vision_features,
                            n_items=n_items, topk=topk, quantile=quantile, cca_dim=cca_dim, threads=threads,
                            device=device)
    all_scores = np.asarray(table["scores"], dtype=float)
    rows, tables = [], []
    for d, (level, w, label) in enumerate(zip(levels, words, labels)):
        files = language_features[d * n_lang:(d + 1) * n_lang]
        scores = all_scores[d * n_lang:(d + 1) * n_lang]
        tables.append(scores)
        row = {"level": level, "label": label, "words": w, **level_summary(scores), "scores": scores.tolist()}
        if world_scenes is not None:
            world = platonic_scores(feature_paths=files, scenes=world_scenes, topk=topk, quantile=quantile)
            vals = np.array([world[name]["score"] if name in world else np.nan for name in language_names])
            row.update(world_mean=float(np.nanmean(vals)), world_std=float(np.nanstd(vals, ddof=1)),
                       world_per_language=vals.tolist())
        rows.append(row)
        print(f"{label}: {w:.1f} words, alignment {row['mean']:.4f} +- {row['std']:.4f}", flush=True)
    trend = density_trend(words=words, tables=tables)
    metrics = {"trend": trend, "level_means": {row["label"]: row["mean"] for row in rows}}
    if world_scenes is not None:
        world_means = [row["world_mean"] for row in rows]
        metrics["world"] = {"level_means": dict(zip(labels, world_means)),
                            **correlations(np.arange(len(rows)), world_means)}
    settings = {"metric": metric, "topk": topk, "quantile": quantile, "n": int(table["settings"]["n"]),
                "captions": str(captions)}
    write_json(out["density"], {"settings": settings, "language_names": list(language_names),
                                "vision_names": list(vision_names), "levels": rows,
                                "trend": trend, **({"world": metrics["world"]} if "world" in metrics else {})})
    write_json(out["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice
    from prh.studies.density.design import CONFIG

    parser = argparse.ArgumentParser(prog="prh run-density", description="PRH Fig 9: alignment against caption density.")
    parser.add_argument("--captions", required=True, help="captions.jsonl whose `texts` are the density levels")
    parser.add_argument("--language-names", nargs="+", required=True)
    parser.add_argument("--language-features", nargs="+", required=True,
                        help="level-major: every language model's file at level 0, then level 1, ...")
    parser.add_argument("--vision-names", nargs="+", required=True)
    parser.add_argument("--vision-features", nargs="+", required=True, help="vision features on the same images")
    parser.add_argument("--levels", type=int, nargs="+", default=None,
                        help="the caption levels (indices into `texts`) of --language-features; default: all")
    parser.add_argument("--scenes", default=None, help="scenes.jsonl (shapes world): also align with the world kernel")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    add_path_options(parser, OUTPUTS, help="{name} JSON written")
    settings = add_slice(parser, CONFIG)
    a = parser.parse_args(argv)
    print(run_density(**settings(a)["alignment"],
                      captions=a.captions, language_names=a.language_names, language_features=a.language_features,
                      vision_names=a.vision_names, vision_features=a.vision_features, out=vars(a),
                      scenes=a.scenes, levels=a.levels,
                      threads=a.threads, device=a.device))
