"""One table's eight metrics in one pass against eight separate passes.

The offline vision-vision table's shape, on synthetic features written to a temporary
folder: 14 models, N = 1000 items, 5 to 13 layers of 64 to 256 dims (a shared signal
plus noise, so neighbour lists overlap as real models' do), k = 10, all 14 x 14 cells.

* separate: ``alignment_table(metric)`` once per metric, as the DAG ran one job per
  metric before: each pass reads every file, clamps, and computes its own states;
* one pass: ``alignment_tables(all eight)``: each file read once, one neighbour search
  and one centred product per layer, one position table per row layer shared by the
  k-NN metrics and cknna.

Both see the same files in the same process, so the ratio is of the engine work alone.
``--cli`` times what the DAG runs instead: eight ``prh align`` processes (one job per
metric, as before) against one ``prh align --metric <all eight>``, so process starts and
imports count too. The tables are checked to be the same. With ``--null`` the headline
metric gets that many permutations in both.

    OMP_NUM_THREADS=1 python benchmarks/bench_align_metrics.py [--threads 1] [--null 0] [--cli]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from prh.io import save_features
from prh.metrics import SUPPORTED_METRICS
from prh.metrics.engine import alignment_table, alignment_tables


def write_models(folder: Path, n_models: int = 14, n: int = 1000, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, 32)).astype(np.float32)
    paths = []
    for m in range(n_models):
        layers, dim = [5, 7, 9, 13][m % 4], [64, 128, 192, 256][m % 4]
        mix = rng.standard_normal((32, layers, dim)).astype(np.float32)
        feats = np.einsum("nc,cld->nld", base, mix) + 2 * rng.standard_normal((n, layers, dim)).astype(np.float32)
        paths.append(str(folder / f"m{m}.safetensors"))
        save_features(paths[-1], torch.from_numpy(feats), {"layer_dims": [dim] * layers})
    return paths


def align_cli(metrics, paths, names, outs, threads: int, null: int) -> float:
    """Wall seconds of one ``prh align`` process over ``metrics``, as a Snakemake job runs it."""
    cmd = [sys.executable, "-m", "prh.cli", "align", "--metric", *metrics, "--topk", "10", "--quantile", "0.95",
           "--cca-dim", "10", "--x-names", *names, "--x-features", *paths, "--threads", str(threads),
           "--null-permutations", str(null), "--null-metrics", "mutual_knn" if "mutual_knn" in metrics else metrics[0],
           "--seed", "0", "--out", *outs]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--null", type=int, default=0, help="permutations of the headline metric (mutual_knn)")
    ap.add_argument("--cli", action="store_true", help="time prh align processes (what the DAG runs), not calls")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_models(Path(tmp))
        names = [Path(p).stem for p in paths]
        times = {}
        if args.cli:
            for metric in SUPPORTED_METRICS:
                times[metric] = align_cli([metric], paths, names, [f"{tmp}/alone_{metric}.json"], args.threads,
                                          args.null if metric == "mutual_knn" else 0)
            one_pass = align_cli(SUPPORTED_METRICS, paths, names, [f"{tmp}/{m}.json" for m in SUPPORTED_METRICS],
                                 args.threads, args.null)
            separate = {m: json.loads(Path(f"{tmp}/alone_{m}.json").read_text()) for m in SUPPORTED_METRICS}
            together = {m: json.loads(Path(f"{tmp}/{m}.json").read_text()) for m in SUPPORTED_METRICS}
        else:
            kw = dict(x_names=names, x_features=paths, topk=10, quantile=0.95, cca_dim=10, seed=0)
            separate = {}
            for metric in SUPPORTED_METRICS:
                start = time.perf_counter()
                separate[metric] = alignment_table(metric, null_permutations=args.null if metric == "mutual_knn" else 0, **kw)
                times[metric] = time.perf_counter() - start
            start = time.perf_counter()
            together = alignment_tables(SUPPORTED_METRICS, null_permutations=args.null, null_metrics=["mutual_knn"], **kw)
            one_pass = time.perf_counter() - start
    worst = max(float(np.max(np.abs(np.asarray(together[m]["scores"], dtype=float) - np.asarray(separate[m]["scores"], dtype=float))))
                for m in SUPPORTED_METRICS)
    same_pairs = all(together[m]["best_pairs"] == separate[m]["best_pairs"] for m in SUPPORTED_METRICS)
    unit = "prh align processes" if args.cli else "calls in one process"
    print(f"14 models, N = 1000, k = 10, {args.threads} thread(s), null permutations: {args.null}, {unit}")
    print("| metric | separate pass (s) |")
    print("| --- | --- |")
    for metric in SUPPORTED_METRICS:
        print(f"| {metric} | {times[metric]:.1f} |")
    total = sum(times.values())
    print(f"| **eight separate passes** | **{total:.1f}** |")
    print(f"| **one pass, all eight** | **{one_pass:.1f}** |")
    print(f"ratio separate / one pass: {total / one_pass:.2f}x; max |score difference| {worst:.1e}; "
          f"best pairs identical: {same_pairs}")


if __name__ == "__main__":
    main()
