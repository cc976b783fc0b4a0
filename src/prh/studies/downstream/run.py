"""Alignment predicts downstream performance (PRH section 2.5, Figure 4).

The paper plots, for each LLM, its mutual-kNN alignment to the strongest vision model
(DINOv2 ViT-g) against its score on HellaSwag (commonsense) and GSM8K (math), marker
size by parameter count, colour by the rank of its language-modelling score 1 - bpb.
Two sources of downstream scores feed the same figure:

* **offline** (``prh score-mc``): a HellaSwag-style multiple-choice task built from
  the shapes world (``build_items``), scored like lm-evaluation-harness scores HellaSwag
  (``choice_logprobs``: summed log-likelihood of each ending given the context; ``acc``
  takes the argmax of the sum, ``acc_norm`` of the sum divided by the ending's UTF-8 bytes).
  Masked LMs (BERT, MiniLM) have no next-token probabilities: they are skipped and listed.
* **paper**: a CSV in ``read_published_scores``'s columns: the DAG writes it from lm-evaluation-harness
  runs of one setting (``prh.evaluation.harness``, ``harness_scores.csv``);
  ``workflow/resources/paper_downstream_scores.csv`` holds published numbers, for comparison.

``figure4`` joins the scores with an alignment JSON (language x vision) and the LMs'
bits-per-byte, and gives per task the points, a least-squares line and Pearson /
Spearman r with p-values. The strongest vision model is, offline, the one with the
highest mean probe accuracy (``strongest_vision_model``); in the paper suite it is named
(``vit-giant-dinov2``).

    prh score-mc --data results/data/shapes_eval --models results/models/gpt2_s_100 ... \\
        --names gpt2_s_100 ... --out results/experiments/downstream/shapes_mc.json --n-items 512
    prh run-downstream --cross-alignment results/alignment/shapes_eval/mutual_knn/zoo_language__zoo_vision.json \\
        --scores results/experiments/downstream/shapes_mc.json --probes results/experiments/zoo/vision.json \\
        --language results/experiments/zoo/language.json --downstream downstream.json --metrics metrics.json
    prh run-downstream --cross-alignment results/alignment/wit_1024/mutual_knn/prh_fig4_language__prh_fig4_vision.json \\
        --scores results/experiments/downstream/harness_scores.csv --strongest-vision vit-giant-dinov2 \\
        --language results/experiments/lm_score/*.json --downstream downstream.json --metrics metrics.json
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np

from prh.evaluation.harness import CSV_COLUMNS, PAPER_TASKS
from prh.evaluation.probes import read_probe_results
from prh.io import add_path_options, named_paths, read_alignment, read_json, write_json
from prh.stats import checkpoint_run_level
from prh.studies.convergence.run import correlations
from prh.studies.downstream.mc_items import ITEM_KINDS, LEVEL, TASK, load_items

__all__ = ["PAPER_TASKS", "ORIGINS", "OUTPUTS", "run_downstream_offline", "strongest_vision_model",
           "read_published_scores", "figure4", "run_figure4", "mc_main", "main"]

# origin of a row's numbers: the model's authors (paper / model card) or an lm-evaluation-harness run (ours or a leaderboard's)
ORIGINS = ("published", "lm-eval-harness")
OFFLINE_TASKS = {"shapes_mc_acc_norm": "acc_norm", "shapes_mc_acc": "acc"}


# ---------------------------------------------------------------- scoring the zoo


def _by_kind(logprobs, items) -> dict:
    """``mc_scores`` of the items of each kind, with their count."""
    from prh.evaluation.likelihood import mc_scores

    out = {}
    for kind in dict.fromkeys(it["kind"] for it in items):
        idx = [i for i, it in enumerate(items) if it["kind"] == kind]
        out[kind] = {**mc_scores(np.asarray(logprobs)[idx], [items[i]["endings"] for i in idx],
                                 [items[i]["label"] for i in idx]), "n": len(idx)}
    return out


def run_downstream_offline(*, data, names: list[str], models: list[str], out, n_items: int = 512, n_choices: int = 4,
                           seed: int = 0, kinds: tuple[str, ...] = tuple(ITEM_KINDS), batch_size: int = 32,
                           device: str = "auto", dtype: str = "auto", progress: bool = True) -> dict:
    """Score every zoo language model on the shapes-world multiple-choice task; write ``out`` (JSON).

    Returns
    -------
    {"task", "settings", "models": {name: {"acc", "acc_norm", "n_items", "n_params", "by_kind",
    "seconds"}}, "skipped": [{"model", "reason"}]}
    """
    from prh.device import resolve_device, resolve_dtype
    from prh.evaluation.likelihood import choice_logprobs, mc_scores
    from prh.models import loaders

    if len(names) != len(models):
        raise ValueError(f"names ({len(names)}) and models ({len(models)}) must pair up one to one")
    items = load_items(data, n_items=n_items, n_choices=n_choices, seed=seed, kinds=tuple(kinds))
    contexts = [it["context"] for it in items]
    endings = [it["endings"] for it in items]
    labels = [it["label"] for it in items]
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    results, skipped = {}, []
    for name, path in zip(names, models):
        net, tok = loaders.load_language_model(path, dtype=dt)
        if not loaders.is_causal_lm(net.config):
            skipped.append({"model": name, "reason": f"not a causal LM ({net.config.architectures}): "
                                                      "no next-token probabilities to score endings with"})
        else:
            t0 = time.perf_counter()
            lp = choice_logprobs(net, tok, contexts, endings, batch_size=batch_size, device=dev, dtype=dt,
                                 progress=progress)
            results[name] = {**mc_scores(lp, endings, labels), "n_items": len(items), "n_params": loaders.count_params(net),
                             "by_kind": _by_kind(lp, items), "seconds": time.perf_counter() - t0}
        del net
        loaders.free_model_memory()
    result = {
        "task": TASK,
        "settings": {"data": str(data), "level": LEVEL, "n_items": len(items), "n_choices": n_choices, "seed": seed,
                     "chance": 1.0 / n_choices, "batch_size": batch_size, "dtype": str(dt).removeprefix("torch."),
                     "kinds": {k: sum(it["kind"] == k for it in items) for k in ITEM_KINDS},
                     "example": items[0]},
        "models": results,
        "skipped": skipped,
    }
    write_json(out, result)
    return result


# ---------------------------------------------------------------- Figure 4


def strongest_vision_model(probes: dict) -> str:
    """The vision model with the highest mean probe accuracy (``models.<m>.mean_accuracy`` of the `prh probe` JSON)."""
    means = {m: r["mean_accuracy"] for m, r in (probes.get("models") or {}).items() if r.get("mean_accuracy") is not None}
    if not means:
        raise ValueError("probes has no models with mean_accuracy: pass the `prh probe` JSON (models.<m>.mean_accuracy)")
    return max(means, key=means.get)


def read_published_scores(path: str | Path) -> dict[str, dict]:
    """Read a CSV of published downstream scores (``workflow/resources/paper_downstream_scores.csv``).

    Columns ``model,hellaswag,gsm8k,hellaswag_setting,gsm8k_setting,origin,source``; lines starting
    with ``#`` are comments; an empty score cell is a missing score (None). A row with a score must
    name its ``source``, its ``origin`` (one of ``ORIGINS``) and each given score's setting (shots, metric).

    Returns
    -------
    {model: {"hellaswag": float | None, "gsm8k": float | None, "hellaswag_setting", "gsm8k_setting", "origin", "source"}}
    """
    path = Path(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{path} has no header line; expected columns {','.join(CSV_COLUMNS)}")
    reader = csv.DictReader(lines)
    if sorted(reader.fieldnames or []) != sorted(CSV_COLUMNS):
        raise ValueError(f"{path} has columns {reader.fieldnames}; expected exactly {list(CSV_COLUMNS)}")
    rows: dict[str, dict] = {}
    for n, row in enumerate(reader, start=2):
        model = (row["model"] or "").strip()
        if not model or model in rows:
            raise ValueError(f"{path} line {n}: model {model!r} is empty or repeated; one row per model")
        rec = {k: (row[k] or "").strip() for k in CSV_COLUMNS if k != "model"}
        for task in PAPER_TASKS:
            cell = rec[task]
            try:
                rec[task] = float(cell) if cell else None
            except ValueError:
                raise ValueError(f"{path} line {n}: {task}={cell!r} is not a number (leave it empty if unknown)") from None
            if rec[task] is not None and not 0 <= rec[task] <= 100:
                raise ValueError(f"{path} line {n}: {task}={cell} is not a percentage in 0..100")
            if rec[task] is not None and not rec[f"{task}_setting"]:
                raise ValueError(f"{path} line {n}: {model} has a {task} score but no {task}_setting (shots, metric)")
        if any(rec[task] is not None for task in PAPER_TASKS) and (not rec["source"] or rec["origin"] not in ORIGINS):
            raise ValueError(f"{path} line {n}: {model} has a score but source={rec['source']!r}, origin={rec['origin']!r}: "
                             f"name the table or page it comes from and an origin in {ORIGINS}, or empty the scores")
        rows[model] = rec
    return rows



def figure4(*, downstream: dict, cross_alignment: dict, strongest_vision: str, bpb: dict, n_params: dict) -> dict:
    """Per task: each LM's alignment to the strongest vision model against its score.

    For LM i with alignment a_i = A[i, j*] (j* the strongest vision model's column) and
    score s_i: a least-squares line s = slope a + intercept, Pearson and Spearman r with
    p-values. Colour key: ``lm_rank`` = rank of 1 - bpb among the LMs that appear in any
    panel and have a bpb, 1 = lowest (worst LM), n = highest.

    Parameters
    ----------
    downstream : {model: {task: score | None}}; a None / NaN score leaves the model out of that panel.
    cross_alignment : an alignment JSON, x_names = language models, y_names = vision models.
    strongest_vision : a name in ``cross_alignment["y_names"]``.
    bpb, n_params : {model: value}; missing models get None.

    Returns
    -------
    {"strongest_vision", "tasks": {task: {"points", "fit", "correlations", "missing"}},
     "not_aligned": models with scores but no alignment row}
    """
    x_names, y_names = list(cross_alignment["x_names"]), list(cross_alignment["y_names"])
    if strongest_vision not in y_names:
        raise ValueError(f"strongest_vision={strongest_vision!r} is not a vision model of the alignment; "
                         f"choose one of {y_names}")
    scores = np.asarray(cross_alignment["scores"], dtype=float)
    align = {lm: float(scores[i, y_names.index(strongest_vision)]) for i, lm in enumerate(x_names)}
    tasks = list(dict.fromkeys(t for row in downstream.values() for t in row))  # first-seen order

    def ok(v):
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    shown = [lm for lm in x_names if lm in downstream and any(ok(v) for v in downstream[lm].values())]
    ranked = [lm for lm in shown if bpb.get(lm) is not None]
    order = np.argsort(np.argsort([1.0 - bpb[lm] for lm in ranked], kind="stable"), kind="stable")
    rank = {lm: int(r) + 1 for lm, r in zip(ranked, order)}
    out = {}
    for task in tasks:
        pts = [{"model": lm, "alignment": align[lm], "score": float(downstream[lm][task]),
                "n_params": n_params.get(lm), "lm_score": None if bpb.get(lm) is None else 1.0 - bpb[lm],
                "lm_rank": rank.get(lm)}
               for lm in x_names if lm in downstream and ok(downstream[lm].get(task))]
        x, y = [p["alignment"] for p in pts], [p["score"] for p in pts]
        slope, icpt = np.polyfit(x, y, 1) if len(pts) >= 2 and np.ptp(x) > 0 else (float("nan"), float("nan"))
        out[task] = {"points": pts, "fit": {"slope": float(slope), "intercept": float(icpt)},
                     "correlations": {**correlations(x, y),  # the run as unit where models are checkpoints
                                      "run_level": checkpoint_run_level([p["model"] for p in pts], x, y)},
                     "missing": [lm for lm in x_names if not (lm in downstream and ok(downstream[lm].get(task)))]}
    return {"strongest_vision": strongest_vision, "tasks": out, "n_ranked": len(rank),
            "not_aligned": sorted(m for m in downstream if m not in align)}


def _language_table(paths: list[str]) -> tuple[dict, dict]:
    """bpb and n_params by model from zoo language JSONs (``models.<m>``) and/or ``prh score-lm`` JSONs."""
    bpb, n_params = {}, {}
    for path in paths:
        d = read_json(path)
        if "models" in d:
            rows = d["models"]
        elif "model" in d and "bpb" in d:
            rows = {d["model"]: d}
        else:
            raise ValueError(f"{path}: expected a zoo language JSON (models.<m>.bpb) or a `prh score-lm` JSON "
                             "(model, bpb, n_params)")
        for m, r in rows.items():
            if r.get("bpb") is not None:
                bpb[m] = float(r["bpb"])
            if r.get("n_params") is not None:
                n_params[m] = int(r["n_params"])
    return bpb, n_params


OUTPUTS = ("downstream", "metrics")  # the files run-downstream writes, by name: one --<name> PATH option each


def run_figure4(*, cross_alignment: str, scores: str, language: list[str], out: dict, probes: str | None = None,
                strongest_vision: str | None = None) -> dict:
    """Figure 4 numbers: writes ``out["downstream"]`` and ``out["metrics"]`` (``OUTPUTS``); returns the metrics.

    ``scores``: the ``prh score-mc`` JSON (tasks ``shapes_mc_acc_norm``, ``shapes_mc_acc``)
    or a CSV of published scores (``read_published_scores``: tasks hellaswag, gsm8k).
    Exactly one of ``probes`` (strongest = best mean probe accuracy) and ``strongest_vision``.
    """
    out = named_paths(out, OUTPUTS, command="run-downstream")
    if (probes is None) == (strongest_vision is None):
        raise ValueError("pass exactly one of probes (the `prh probe` JSON) and strongest_vision (a model name)")
    if probes is not None:
        strongest_vision = strongest_vision_model(read_probe_results(probes))
    bpb, n_params = _language_table(language)
    provenance: dict = {}
    if str(scores).endswith(".csv"):
        rows = read_published_scores(scores)
        downstream = {m: {t: r[t] for t in PAPER_TASKS} for m, r in rows.items()}
        provenance = {m: {k: r[k] for k in ("hellaswag_setting", "gsm8k_setting", "origin", "source")}
                      for m, r in rows.items()}
        units = "percent (published)"
    else:
        mc = read_json(scores)
        if "models" not in mc or "task" not in mc:
            raise ValueError(f"scores={scores!r} is neither a CSV nor a `prh score-mc` JSON (task, models)")
        downstream = {m: {t: r[k] for t, k in OFFLINE_TASKS.items()} for m, r in mc["models"].items()}
        for m, r in mc["models"].items():
            n_params.setdefault(m, r.get("n_params"))
        provenance = {"task": mc["task"], "settings": mc.get("settings"), "skipped": mc.get("skipped", [])}
        units = "fraction correct"
    cross = read_alignment(cross_alignment)
    fig = figure4(downstream=downstream, cross_alignment=cross, strongest_vision=strongest_vision, bpb=bpb,
                  n_params=n_params)
    dropped = [m for m in fig["not_aligned"] if any(v is not None for v in downstream[m].values())]
    if dropped:
        raise ValueError(f"models {dropped} have scores in {scores} but no row in {cross_alignment}: they would drop "
                         "out of Fig 4; add them to the aligned language set (downstream.language_models) or empty their scores")
    settings = {**cross.get("settings", {}), "cross_alignment": str(cross_alignment), "scores": str(scores),
                "strongest_vision_from": "probes" if probes else "parameter", "units": units}
    write_json(out["downstream"], {"settings": settings, "provenance": provenance, **fig})
    metrics = {task: {**t["correlations"], "slope": t["fit"]["slope"]} for task, t in fig["tasks"].items()}
    write_json(out["metrics"], {"strongest_vision": strongest_vision, "tasks": metrics})
    return metrics


# ---------------------------------------------------------------- CLI


def mc_main(argv: list[str] | None = None) -> None:
    from prh.device import DTYPES
    from prh.slices import add_slice
    from prh.studies.downstream.design import MC_CONFIG

    p = argparse.ArgumentParser(prog="prh score-mc", description="shapes-world multiple-choice task (Fig. 4, offline)")
    p.add_argument("--data", required=True, help="shapes dataset dir with scenes.jsonl and captions.jsonl")
    p.add_argument("--models", nargs="+", required=True, help="language model checkpoint dirs")
    p.add_argument("--names", nargs="+", default=None, help="a name per model (default: the dir names)")
    p.add_argument("--out", required=True, help="result JSON, e.g. results/experiments/downstream/shapes_mc.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", nargs="+", default=list(ITEM_KINDS), choices=list(ITEM_KINDS), help="item kinds")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    p.add_argument("--no-progress", action="store_true")
    settings = add_slice(p, MC_CONFIG)
    a = p.parse_args(argv)
    names = a.names or [Path(m).name for m in a.models]
    r = run_downstream_offline(data=a.data, names=names, models=a.models, out=a.out, **settings(a)["downstream"],
                               seed=a.seed, kinds=a.kinds, batch_size=a.batch_size, device=a.device,
                               dtype=a.dtype, progress=not a.no_progress)
    for name, m in r["models"].items():
        kinds = ", ".join(f"{k} {v['acc']:.3f}" for k, v in m["by_kind"].items())
        print(f"{name}: acc {m['acc']:.3f}, acc_norm {m['acc_norm']:.3f} (chance {r['settings']['chance']:.3f}; {kinds})")
    for s in r["skipped"]:
        print(f"{s['model']}: skipped, {s['reason']}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh run-downstream", description="PRH Fig. 4: alignment vs downstream scores")
    p.add_argument("--cross-alignment", required=True, help="language__vision alignment JSON")
    p.add_argument("--scores", required=True, help="`prh score-mc` JSON or a CSV of published scores")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--probes", help="`prh probe` JSON: strongest vision model = best mean probe accuracy")
    which.add_argument("--strongest-vision", help="name of the strongest vision model (paper: vit-giant-dinov2)")
    p.add_argument("--language", nargs="+", required=True,
                   help="zoo language JSON (models.<m>.bpb, n_params) and/or `prh score-lm` JSONs")
    add_path_options(p, OUTPUTS, help="{name} JSON written")
    a = p.parse_args(argv)
    print(run_figure4(cross_alignment=a.cross_alignment, scores=a.scores, language=a.language, out=vars(a),
                      probes=a.probes, strongest_vision=a.strongest_vision))
