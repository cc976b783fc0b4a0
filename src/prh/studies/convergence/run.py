"""Convergence of representations (PRH section 2, Figs 2 and 3) and the platonic reference.

* Competence (Fig 2 left): a vision model *solves* a task when its probe accuracy is
  at least ``solve_fraction`` (0.8) of the best model's on that task. Models are binned
  by the number of tasks they solve; per bin, the mean pairwise mutual-kNN alignment
  (diagonal excluded) with its standard error.
* Model map (Fig 2 right): UMAP of the models, distance -log(alignment), coloured by competence; with fewer than
  ``min_umap_models`` models, classical (metric) MDS instead.
* Language-vision (Fig 3): cross-modal alignment of every (language, vision) pair
  against the language model's 1 - bits-per-byte (causal LMs only), one linear fit per
  vision family, pooled Pearson and Spearman r with p-values. The pairs of one LM are not
  independent, so the pooled numbers are descriptive only (``language_vision_descriptive``);
  the test is the pre-registered one point per LM (``prh.studies.convergence.preregistered``,
  ``language_vision_preregistered``) when a competence JSON is given.
* Platonic reference (offline suite, beyond the paper): each model's mutual-kNN
  alignment with the world's ground-truth kernel K over the latent scenes, against its
  competence (vision: mean probe accuracy) or 1 - bpb (language), Spearman r and p; and
  the same under each pre-registered kernel setting of ``platonic_sensitivity``.
    prh run-convergence --probes results/experiments/zoo/vision.json \\
        --vision-alignment results/alignment/shapes_vision/mutual_knn/zoo_vision__zoo_vision.json \\
        --cross-alignment results/alignment/shapes_eval/mutual_knn/zoo_language__zoo_vision.json \\
        --language results/experiments/zoo/language.json --families '{"resnet_xs_sup": "supervised"}' \\
        --competence competence.json --model-map model_map.json --language-vision language_vision.json \\
        --metrics metrics.json --bins 0 1 3 6 --solve-fraction 0.8 \\
        --preregistered-competence results/experiments/zoo/competence.json --preregistered-vision-models ...
    prh run-platonic --vision-features results/features/shapes_vision/*.safetensors --vision-scenes ... \\
        --language-features ... --paired-scenes results/data/shapes_eval/scenes.jsonl --probes ... --language ... \\
        --platonic platonic.json --metrics platonic_metrics.json --kernel '{"background_weight": 0.05}'  # world.kernel
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from prh.checks import check_bins
from prh.config import schema_defaults
from prh.io import add_path_options, json_object, named_paths, read_alignment, read_json, read_jsonl, write_json
from prh.studies.convergence.nulls import null_summary
from prh.studies.convergence.preregistered import amended_on_runs, preregistered_language_vision, run_level
from prh.errors import UsageError
from prh.evaluation.probes import read_probe_results

__all__ = ["DEFAULTS", "OUTPUTS", "correlations", "solved_counts", "competence_bins", "model_map", "language_vision", "platonic_scores", "null_summary", "read_lm_competence", "run_convergence", "run_platonic", "main", "platonic_main"]

DEFAULTS = schema_defaults("convergence")  # the `convergence:` block's defaults (workflow/schemas/convergence.schema.yaml)
# The files each command writes, by name: one --<name> PATH option each (run_convergence's and run_platonic's ``out``)
OUTPUTS = {"run-convergence": ("competence", "model_map", "language_vision", "metrics"),
           "run-platonic": ("platonic", "metrics")}


def _check_square(alignment: dict) -> np.ndarray:
    scores = np.asarray(alignment["scores"], dtype=float)
    if alignment["x_names"] != alignment["y_names"] or scores.shape != (len(alignment["x_names"]),) * 2:
        raise ValueError("vision alignment must be square with x_names == y_names: pass the vision__vision JSON")
    return (scores + scores.T) / 2  # mutual k-NN is symmetric; averaging guards against float noise


def solved_counts(probes: dict, *, solve_fraction: float = 0.8) -> dict[str, int]:
    """Number of tasks each model solves: acc[m, t] >= solve_fraction * max_m' acc[m', t].

    Parameters
    ----------
    probes : the ``prh probe`` JSON (``models.<m>.tasks.<t>.accuracy``)
    solve_fraction : fraction of the best model's accuracy that counts as solving (PRH: 0.8)
    """
    if not 0 < solve_fraction <= 1:
        raise ValueError(f"solve_fraction must be in (0, 1], got {solve_fraction}")
    models = probes["models"]
    tasks = sorted({t for m in models.values() for t in m["tasks"]})
    best = {t: max(m["tasks"][t]["accuracy"] for m in models.values()) for t in tasks}
    return {name: sum(m["tasks"][t]["accuracy"] >= solve_fraction * best[t] for t in m["tasks"])
            for name, m in models.items()}


def competence_bins(*, scores: np.ndarray, names: list[str], solved: dict[str, int], bins: list[int]) -> list[dict]:
    """Mean pairwise alignment of the models within each competence bin, with its standard error.

    Bin i holds models with ``bins[i] <= tasks solved < bins[i+1]``. Per bin over the
    P = n(n-1)/2 pairs i < j: mean = Σ a_ij / P, sem = std(a, ddof=1) / sqrt(P)
    (NaN with fewer than 2 models or pairs).
    """
    if len(bins) < 2 or any(b >= c for b, c in zip(bins, bins[1:])):
        raise ValueError(f"bins must be >= 2 increasing edges, e.g. [0, 4, 7, 11], got {bins}")
    index = {n: i for i, n in enumerate(names)}
    rows = []
    for lo, hi in zip(bins, bins[1:]):
        members = [n for n in names if n in solved and lo <= solved[n] < hi]
        pairs = [scores[index[a], index[b]] for i, a in enumerate(members) for b in members[i + 1:]]
        mean = float(np.mean(pairs)) if pairs else float("nan")
        sem = float(np.std(pairs, ddof=1) / np.sqrt(len(pairs))) if len(pairs) > 1 else float("nan")
        rows.append({"lo": lo, "hi": hi, "models": members, "n_pairs": len(pairs), "mean": mean, "sem": sem})
    return rows


def model_map(*, scores: np.ndarray, seed: int = 0, min_umap_models: int = 5, n_neighbors: int = 5) -> dict:
    """2-D embedding of the models from distances d_ij = -log(a_ij) (d_ii = 0).

    UMAP (metric='precomputed', seeded) when there are at least ``min_umap_models``
    models; classical MDS (double-centred d², top two eigenvectors) below that, where
    UMAP's neighbour graph is degenerate.
    """
    n = len(scores)
    dist = -np.log(np.clip(scores, 1e-6, 1.0))
    np.fill_diagonal(dist, 0.0)
    if n >= min_umap_models:
        import umap  # 30 s of numba compilation: only when a map is made

        reducer = umap.UMAP(n_neighbors=min(n_neighbors, n - 1), metric="precomputed", random_state=seed,
                            init="random", n_components=2)
        return {"method": "umap", "coords": reducer.fit_transform(dist).tolist()}
    centre = np.eye(n) - 1.0 / n
    evals, evecs = np.linalg.eigh(-0.5 * centre @ (dist ** 2) @ centre)
    top = np.argsort(evals)[::-1][:2]
    coords = evecs[:, top] * np.sqrt(np.clip(evals[top], 0.0, None))
    coords *= np.sign(coords[np.argmax(np.abs(coords), axis=0), range(coords.shape[1])])  # fixed sign
    return {"method": f"classical MDS (fewer than {min_umap_models} models for UMAP)", "coords": coords.tolist()}


def correlations(x, y) -> dict:
    """Pearson and Spearman r with p-values of two equal-length samples (NaN when n < 3 or either is constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"pearson_r": float("nan"), "pearson_p": float("nan"), "spearman_r": float("nan"),
                "spearman_p": float("nan"), "n": len(x)}
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return {"pearson_r": float(pr.statistic), "pearson_p": float(pr.pvalue),
            "spearman_r": float(sr.statistic), "spearman_p": float(sr.pvalue), "n": len(x)}


def language_vision(*, cross: dict, bpb: dict[str, float], families: dict[str, str]) -> dict:
    """Alignment of every (language, vision) pair against the LM's 1 - bpb, per vision family.

    Per family a least-squares line y = slope x + intercept; pooled over all pairs,
    Pearson and Spearman r with p-values. LMs without bpb (masked LMs) are left out.
    """
    scores = np.asarray(cross["scores"], dtype=float)
    points = [{"language": lm, "vision": vm, "family": families.get(vm, vm), "lm_score": 1.0 - bpb[lm],
               "alignment": float(scores[i, j])}
              for i, lm in enumerate(cross["x_names"]) if lm in bpb
              for j, vm in enumerate(cross["y_names"])]
    if not points:
        raise ValueError("no language model of the cross alignment has a bpb: pass the zoo language.json")
    fits = {}
    for fam in sorted({p["family"] for p in points}):
        x = [p["lm_score"] for p in points if p["family"] == fam]
        y = [p["alignment"] for p in points if p["family"] == fam]
        slope, icpt = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (float("nan"), float("nan"))
        fits[fam] = {"slope": float(slope), "intercept": float(icpt), **correlations(x, y)}
    pooled = correlations([p["lm_score"] for p in points], [p["alignment"] for p in points])
    skipped = [lm for lm in cross["x_names"] if lm not in bpb]
    return {"points": points, "fits": fits, "pooled": pooled, "skipped_no_bpb": skipped}


def _config(config: dict | None) -> dict:
    """The convergence block: ``config`` over the schema defaults, the ``preregistered`` sub-block merged key by key."""
    config = config or {}
    cfg = {**DEFAULTS, **config}
    cfg["preregistered"] = {**DEFAULTS["preregistered"], **config.get("preregistered", {})}
    for where, got, allowed in (("config", cfg, DEFAULTS), ("config.preregistered", cfg["preregistered"],
                                                          DEFAULTS["preregistered"])):
        unknown = set(got) - set(allowed)
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return cfg


def read_lm_competence(path: str) -> dict:
    """The competence JSON of the pre-registered test, checked::

        {"gate_passed": true | false | null,            # the validity gate (null: not computed)
         "language_models": ["gpt2_s_1000_s0", ...],     # optional: the units; default every key of models
         "models": {"gpt2_s_1000_s0": {"reducible_fraction": 0.81, "mc_accuracy": 0.74, ...}, ...}}
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or "gate_passed" not in data:
        raise ValueError(f"{path}: expected {{\"gate_passed\": true|false|null, \"models\": {{lm: {{predictor: value}}}}, "
                         "optional \"language_models\": [lm, ...]}")
    return {"gate_passed": data["gate_passed"], "models": data["models"],
            "language_models": list(data.get("language_models") or data["models"])}


def run_convergence(*, probes: str, vision_alignment: str, cross_alignment: str, language: str,
                    families: dict, out: dict, config: dict | None = None,
                    preregistered_competence: str | None = None,
                    preregistered_vision_models: list[str] | None = None, amended_runs: dict | None = None,
                    coverage: dict | None = None) -> dict:
    """Fig 2 (left, right) and Fig 3 numbers: writes ``out``'s competence, model_map, language_vision and
    metrics JSON files (``OUTPUTS``: name -> path); returns the metrics.

    With ``preregistered_competence`` (``read_lm_competence``'s JSON) and
    ``preregistered_vision_models`` (the model set ``config.preregistered.vision_models``
    names, resolved by the caller), metrics.json also holds ``language_vision_preregistered``
    (``preregistered_language_vision`` on the cross alignment, which then needs a permutation
    null). The pooled pair-level statistics are kept as ``language_vision_descriptive``. ``coverage``
    (``prh.studies.convergence.design.fig2_coverage``: which of the paper's models are present) goes into
    competence.json and metrics.json as it is.
    """
    cfg, out = _config(config), named_paths(out, OUTPUTS["run-convergence"], command="run-convergence")
    if (preregistered_competence is None) != (preregistered_vision_models is None):
        raise UsageError("pass both preregistered_competence and preregistered_vision_models, or neither")
    align = read_alignment(vision_alignment)
    scores, names = _check_square(align), align["x_names"]
    probe_results = read_probe_results(probes)
    solved = solved_counts(probe_results, solve_fraction=cfg["solve_fraction"])
    missing = [n for n in names if n not in solved]
    if missing:
        raise ValueError(f"models {missing} of --vision-alignment have no probe results in --probes")
    n_tasks = len({t for m in probe_results["models"].values() for t in m["tasks"]})
    bins = competence_bins(scores=scores, names=names, solved=solved, bins=check_bins(bins=cfg["bins"], n_tasks=n_tasks))
    settings = {**align["settings"], "solve_fraction": cfg["solve_fraction"], "bins": cfg["bins"]}
    cover = {"coverage": coverage} if coverage else {}
    write_json(out["competence"], {"settings": settings, "solved": solved, "bins": bins, **cover})
    emb = model_map(scores=scores, seed=cfg["seed"], min_umap_models=cfg["min_umap_models"],
                    n_neighbors=cfg["n_neighbors"])
    write_json(out["model_map"], {"settings": settings, "names": names, "solved": [solved[n] for n in names],
                                        "families": [families.get(n, n) for n in names], **emb})
    bpb = {m: v["bpb"] for m, v in read_json(language)["models"].items() if v.get("bpb") is not None}
    cross = read_alignment(cross_alignment)
    lv = language_vision(cross=cross, bpb=bpb, families=families)
    write_json(out["language_vision"], {"settings": cross["settings"], **lv})
    metrics = {"competence_bins": {f"{b['lo']}-{b['hi'] - 1}": {"mean": b["mean"], "sem": b["sem"],
                                                                 "n_models": len(b["models"])} for b in bins},
               "competence_alignment": correlations([solved[n] for n in names],
                                                     [np.mean(np.delete(scores[i], i)) for i in range(len(names))]),
               "language_vision_descriptive": {**lv["pooled"], "unit": "(language, vision) pair",
                                               "note": "pairs are not independent: descriptive only"}, **cover}
    if preregistered_competence is not None:
        pre, comp = cfg["preregistered"], read_lm_competence(preregistered_competence)
        metrics["language_vision_preregistered"] = registered = {
            **preregistered_language_vision(
                cross=cross, competence=comp["models"], language_models=comp["language_models"],
                vision_models=list(preregistered_vision_models), predictors=pre["predictors"],
                permutations=pre["permutations"], alternative=pre["alternative"], seed=pre["seed"],
                gate_passed=comp["gate_passed"], alpha=pre["alpha"]),
            "vision_set": pre["vision_models"],
            "gate_rule": {"min_steps": pre["min_steps_for_gate"], **pre["gate"]},
        }
        if amended_runs is not None:
            metrics["language_vision_amended"] = amended_on_runs(cross, comp, amended_runs, preregistered_vision_models, pre)
            registered["run_level"] = run_level(registered, amended_runs, alternative=pre["alternative"])
    nulls = {"vision": null_summary(align), "cross": null_summary(cross)}
    if any(nulls.values()):
        metrics["calibration"] = {k: v for k, v in nulls.items() if v}
    write_json(out["metrics"], metrics)
    return metrics


def _platonic_table(*, feature_paths: list[str], scenes: list[dict], kernels: list[dict], topk: int,
                    quantile: float) -> list[dict]:
    """``platonic_scores`` under each kernel setting of ``kernels``, each model's features loaded once."""
    from prh.data.shapes import world_features
    from prh.io import load_features
    from prh.metrics import layer_pair_scores, prepare_features

    worlds = [world_features(scenes, **kernel)[:, None, :] for kernel in kernels]
    out = [{} for _ in kernels]
    for path in feature_paths:
        feats, meta = load_features(path, with_meta=True)
        if feats.shape[0] != len(scenes):
            raise ValueError(f"{path} has {feats.shape[0]} items but the scenes have {len(scenes)}: "
                             "pass the scenes of the dataset the features were extracted from")
        clamped = prepare_features(feats, q=quantile, layer_dims=meta.get("layer_dims"))
        for table, world in zip(out, worlds):
            res = layer_pair_scores("mutual_knn", clamped, world, topk=topk)
            table[meta.get("model", Path(path).stem)] = {"score": res.best_score, "layer": res.best_pair[0]}
    return out


def platonic_scores(*, feature_paths: list[str], scenes: list[dict], topk: int = 10, quantile: float = 0.95,
                    kernel: dict | None = None) -> dict:
    """Mutual-kNN alignment of each model with the world kernel K (best layer of the model).

    The world is a one-layer "model" F with F Fᵀ = K (``world_features``, settings
    ``kernel``: the params.yaml ``world.kernel`` block, missing keys its defaults); K has
    ones on the diagonal, so F's rows are unit vectors and the k-NN of F under the inner
    product are the k-NN of K itself. F is not clamped: it is exact, not a network's
    activation. Model features are clamped and normalised as the alignment engine does.
    """
    from prh.data.shapes import world_config

    kernel = world_config({"kernel": kernel or {}})["kernel"]
    return _platonic_table(feature_paths=feature_paths, scenes=scenes, kernels=[kernel], topk=topk, quantile=quantile)[0]


def _platonic_correlations(vision: dict, lang: dict, competence: dict[str, float], lm_score: dict) -> dict:
    """Spearman / Pearson of each model's world alignment against competence (vision) and 1 - bpb (language)."""
    from prh.stats import checkpoint_run_level

    scored = [m for m in lang if lm_score.get(m) is not None]
    x, y = [lm_score[m] for m in scored], [lang[m]["score"] for m in scored]
    return {"vision": correlations([competence[m] for m in vision], [vision[m]["score"] for m in vision]),  # the run as unit for
            "language": {**correlations(x, y), "run_level": checkpoint_run_level(scored, x, y)}}  # checkpoints of runs


def run_platonic(*, vision_features: list[str], vision_scenes: str, language_features: list[str],
                 paired_scenes: str, probes: str, language: str, out: dict, config: dict | None = None,
                 kernel: dict | None = None) -> dict:
    """Platonic reference: writes ``out["platonic"]`` and ``out["metrics"]`` (platonic_metrics.json).

    ``kernel``: the params.yaml ``world.kernel`` block (missing keys: its defaults). The
    sensitivity analysis reruns the reference with each entry of the convergence block's
    pre-registered ``platonic_sensitivity`` laid over ``kernel``; platonic_metrics.json's
    ``sensitivity`` lists, per entry, its settings and the Spearman r and p of vision and
    language. Returns the metrics (``platonic``, ``sensitivity``).
    """
    from prh.data.shapes import world_config

    cfg, out = _config(config), named_paths(out, OUTPUTS["run-platonic"], command="run-platonic")
    kw = {"topk": cfg["topk"], "quantile": cfg["quantile"]}
    base = world_config({"kernel": kernel or {}})["kernel"]
    kernels = [base] + [world_config({"kernel": {**base, **setting}})["kernel"] for setting in cfg["platonic_sensitivity"]]
    vision_all = _platonic_table(feature_paths=vision_features, kernels=kernels, **kw,
                                 scenes=[r["scene"] for r in read_jsonl(vision_scenes, keys=("scene",))])
    lang_all = _platonic_table(feature_paths=language_features, kernels=kernels, **kw,
                               scenes=[r["scene"] for r in read_jsonl(paired_scenes, keys=("scene",))])
    probe_models = read_probe_results(probes)["models"]
    competence = {name: float(np.mean([t["accuracy"] for t in probe_models[name]["tasks"].values()]))
                  for name in vision_all[0]}
    bpb = {m: v.get("bpb") for m, v in read_json(language)["models"].items()}
    lm_score = {name: None if bpb.get(name) is None else 1.0 - bpb[name] for name in lang_all[0]}
    vision, lang = vision_all[0], lang_all[0]
    for name, row in vision.items():
        row["competence"] = competence[name]
    for name, row in lang.items():
        row["lm_score"] = lm_score[name]
    metrics = _platonic_correlations(vision, lang, competence, lm_score)
    sensitivity = []
    for setting, kern, v, lg in zip(cfg["platonic_sensitivity"], kernels[1:], vision_all[1:], lang_all[1:]):
        corr = _platonic_correlations(v, lg, competence, lm_score)
        sensitivity.append({"setting": setting, "kernel": kern, **{
            side: {"spearman_r": c["spearman_r"], "p": c["spearman_p"], "n": c["n"]} for side, c in corr.items()}})
    write_json(out["platonic"], {"settings": {"metric": "mutual_knn", **kw, "kernel": base},
                                                 "vision": vision, "language": lang, "correlations": metrics})
    write_json(out["metrics"], {"platonic": metrics, "sensitivity": sensitivity})
    return {"platonic": metrics, "sensitivity": sensitivity}


def main(argv: list[str] | None = None) -> None:
    import json

    from prh.slices import add_slice
    from prh.studies.convergence.design import CONFIG

    parser = argparse.ArgumentParser(prog="prh run-convergence", description="PRH Figs 2 and 3: competence, model map, language-vision.")
    parser.add_argument("--probes", required=True, help="`prh probe` JSON of the vision models")
    parser.add_argument("--vision-alignment", required=True, help="vision__vision mutual_knn alignment JSON")
    parser.add_argument("--cross-alignment", required=True, help="language__vision alignment JSON (paired set)")
    parser.add_argument("--language", required=True, help="JSON with models.<m>.bpb (results/experiments/zoo/language.json)")
    parser.add_argument("--families", type=json_object, default="{}", help="JSON: vision model -> family")
    add_path_options(parser, OUTPUTS["run-convergence"], help="{name}.json written")
    parser.add_argument("--bins", nargs="+", type=json.loads, required=True,
                        help="edges of the competence bins in tasks solved: the suite's convergence.bins")
    settings = add_slice(parser, CONFIG["run-convergence"])
    parser.add_argument("--preregistered-competence", default=None,
                        help='JSON {"gate_passed": bool|null, "models": {lm: {predictor: value}}, '
                             'optional "language_models": [lm, ...]}: adds the pre-registered one-point-per-LM test')
    parser.add_argument("--preregistered-vision-models", nargs="+", default=None,
                        help="the vision set of the pre-registered outcome (the model set convergence.preregistered."
                             "vision_models names); columns of --cross-alignment")
    parser.add_argument("--amended-runs", type=json_object, default=None,
                        help='JSON {run: {"final": model, "untrained": model, "seed": n}} (prh.config.language_runs): '
                             "adds the amended test of 2026-11-26, one point per run (needs --preregistered-competence)")
    parser.add_argument("--coverage", type=json_object, default=None,
                        help="JSON: which of the paper's Fig 2 models are present (design.fig2_coverage)")
    args = parser.parse_args(argv)
    metrics = run_convergence(probes=args.probes, vision_alignment=args.vision_alignment,
                              cross_alignment=args.cross_alignment, language=args.language,
                              families=args.families, out=vars(args),
                              config={**settings(args)["convergence"], "bins": args.bins},
                              preregistered_competence=args.preregistered_competence,
                              preregistered_vision_models=args.preregistered_vision_models,
                              amended_runs=args.amended_runs, coverage=args.coverage)
    print(metrics)


def platonic_main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice
    from prh.studies.convergence.design import CONFIG

    parser = argparse.ArgumentParser(prog="prh run-platonic", description="Alignment with the world kernel.")
    parser.add_argument("--vision-features", nargs="+", required=True, help="vision-set feature files")
    parser.add_argument("--vision-scenes", required=True, help="scenes.jsonl of the vision set")
    parser.add_argument("--language-features", nargs="+", required=True, help="paired-set language feature files")
    parser.add_argument("--paired-scenes", required=True, help="scenes.jsonl of the paired set")
    parser.add_argument("--probes", required=True, help="`prh probe` JSON of the vision models")
    parser.add_argument("--language", required=True, help="JSON with models.<m>.bpb")
    add_path_options(parser, OUTPUTS["run-platonic"], help="{name} JSON written")
    settings = add_slice(parser, CONFIG["run-platonic"])  # topk, quantile, sensitivity; the world's kernel
    args = parser.parse_args(argv)
    config = settings(args)
    print(run_platonic(vision_features=args.vision_features, vision_scenes=args.vision_scenes,
                       language_features=args.language_features, paired_scenes=args.paired_scenes,
                       probes=args.probes, language=args.language, out=vars(args),
                       config=config["convergence"], kernel=config["world"]["kernel"]))
