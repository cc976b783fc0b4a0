"""Does extracting in bf16 or fp16 move the alignment tables? The offline zoo's models, run in each dtype.

A GPU extracts several times faster in bf16 than in fp32 (the paper suite runs vision in fp32 as the reference
does; language in bf16). This study re-extracts the features of the same models on the same items in bfloat16
and float16 (on a CPU: torch's own bf16/fp16 kernels, which round like a GPU's storage but accumulate as the CPU
does), computes the alignment tables of each dtype with the engine (features are cast to float32 before the
metric, as always), and compares every cell with the float32 table:

- the largest and the median |score - fp32 score| over the cells of each table;
- how many cells' best layer pairs move;
- beside them, the range of the fp32 scores (off the diagonal of a set against itself): the differences a
  change must stay well below.

    python benchmarks/precision_study.py --results results --configfile tests/smoke/params.yaml \\
        --json benchmarks/precision_study.json --docs docs/metrics.md
    python benchmarks/precision_study.py --json benchmarks/precision_study.json --docs docs/metrics.md --render

The table in docs/metrics.md (between <!-- generated:precision --> and <!-- /generated:precision -->) is written
from the JSON by --docs; --render rewrites it from an existing JSON without computing anything.

It reads the float32 features the workflow wrote (results/features/<dataset>/<model>.safetensors) and the zoo
checkpoints beside them; it writes the other dtypes' features and tables under <results>/precision/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

TABLES = (("paired_dataset", "language_models", "vision_models"), ("vision_dataset", "vision_models", "vision_models"))
DTYPES = ("bfloat16", "float16")


def config(params: str, configfiles: list[str]) -> dict:
    from prh.checks import check_config
    from prh.config import config_layers, merge

    layers = config_layers(base=params, configfiles=configfiles)
    cfg: dict = {}
    for _, values in layers:
        cfg = merge(cfg, values)
    return check_config(cfg, layers=layers)


def extract(results: Path, dataset: str, model: str, dtype: str) -> Path:
    """The features of ``model`` on ``dataset`` in ``dtype``, with the options of the workflow's float32 file."""
    from prh.extract import extract_language_dataset, extract_vision_dataset
    from prh.io import features_meta_path, read_json

    ref = results / "features" / dataset / f"{model}.safetensors"
    meta = read_json(features_meta_path(ref))
    out = results / "precision" / dtype / "features" / dataset / f"{model}.safetensors"
    if not out.exists():
        kw = dict(model=meta["source"], data=str(results / "data" / dataset), out=str(out), name=model, device="cpu",
                  dtype=dtype, progress=False, layers=meta.get("layers", "all"))
        if meta["modality"] == "vision":
            extract_vision_dataset(**kw)
        else:
            extract_language_dataset(**kw, bpb=False, **{k: meta[k] for k in (
                "pooling", "prompt_template", "text_field", "text_index", "average_samples")})
    return out


def table(metric: str, cfg: dict, xs: list[str], ys: list[str], xf: list[Path], yf: list[Path]) -> dict:
    from prh.metrics.engine import alignment_tables

    a = cfg["alignment"]
    return alignment_tables([metric], x_names=xs, x_features=[str(p) for p in xf], y_names=ys,
                            y_features=[str(p) for p in yf], topk=a["topk"], quantile=a["quantile"])[metric]


def compare(ref: dict, other: dict) -> dict:
    d = np.abs(np.asarray(other["scores"], float) - np.asarray(ref["scores"], float)).ravel()
    moved = sum(p != q for r1, r2 in zip(ref["best_pairs"], other["best_pairs"]) for p, q in zip(r1, r2))
    s = np.asarray(ref["scores"], float)
    off = s[~np.eye(*s.shape, dtype=bool)] if s.shape[0] == s.shape[1] and ref["x_names"] == ref["y_names"] else s.ravel()
    return {"cells": int(d.size), "max_abs_change": float(d.max()), "median_abs_change": float(np.median(d)),
            "best_pairs_moved": int(moved), "fp32_score_range": [float(off.min()), float(off.max())]}


HEADER = ("| table | metric | fp32 scores (off-diagonal) | bf16: max / median abs. change, best pairs moved | fp16: same |",
          "| --- | --- | --- | --- | --- |")
BLOCK = ("<!-- generated:precision -->", "<!-- /generated:precision -->")


def rows(study: dict) -> list[str]:
    """One line per table of a study JSON, as docs/metrics.md's table (and, without the pipes, the report) shows it."""
    out = []
    for r in study["tables"]:
        lo, hi = r["bfloat16"]["fp32_score_range"]
        cells = [f"{r['x']} x {r['y']} ({r['dataset']}, N = {r['n']:,})", r["metric"], f"{lo:.3f}-{hi:.3f}"]
        for dtype in DTYPES:
            c = r[dtype]
            cells.append(f"{c['max_abs_change']:.4f} / {c['median_abs_change']:.5f}, {c['best_pairs_moved']} of {c['cells']}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def write_docs(path: Path, study: dict) -> None:
    """Replace the generated precision block of ``path`` (docs/metrics.md) with the table of ``study``."""
    text = path.read_text()
    start, end = BLOCK
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{path} needs one '{start}' line followed by one '{end}' line")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text("\n".join([head + start, *HEADER, *rows(study), end]) + tail)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--configfile", action="append", default=[])
    p.add_argument("--metrics", nargs="+", default=["mutual_knn", "cka"])
    p.add_argument("--json", required=True)
    p.add_argument("--docs", type=Path, help="the markdown file whose generated precision block to rewrite")
    p.add_argument("--render", action="store_true", help="only rewrite --docs from the existing --json")
    a = p.parse_args()
    if a.render:
        if not a.docs:
            p.error("--render needs --docs")
        write_docs(a.docs, json.loads(Path(a.json).read_text()))
        return
    cfg, results = config(a.params, a.configfile), Path(a.results)
    suite, sets = cfg["suites"][cfg["suite"]], cfg["model_sets"]
    out = {"suite": cfg["suite"], "configfiles": a.configfile, "tables": []}
    for ds_key, x_key, y_key in TABLES:
        ds = suite[ds_key]
        xs, ys = sets[suite[x_key]], sets[suite[y_key]]
        xs = [m for m in xs if (results / "features" / ds / f"{m}.safetensors").exists()]
        ys = [m for m in ys if (results / "features" / ds / f"{m}.safetensors").exists()]
        feats = {"float32": {m: results / "features" / ds / f"{m}.safetensors" for m in set(xs) | set(ys)}}
        for dtype in DTYPES:
            feats[dtype] = {m: extract(results, ds, m, dtype) for m in set(xs) | set(ys)}
        for metric in a.metrics:
            ref = table(metric, cfg, xs, ys, [feats["float32"][m] for m in xs], [feats["float32"][m] for m in ys])
            row = {"dataset": ds, "x": suite[x_key], "y": suite[y_key], "metric": metric, "n_x": len(xs), "n_y": len(ys),
                   "n": ref["settings"]["n"]}
            for dtype in DTYPES:
                other = table(metric, cfg, xs, ys, [feats[dtype][m] for m in xs], [feats[dtype][m] for m in ys])
                row[dtype] = compare(ref, other)
            out["tables"].append(row)
            print(json.dumps(row), flush=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print("\n".join(rows(out)))
    if a.docs:
        write_docs(a.docs, out)


if __name__ == "__main__":
    main()
