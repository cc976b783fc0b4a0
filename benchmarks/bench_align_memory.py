"""Peak memory of `prh align` on a synthetic L-layer x D-wide x N-item features file.

The paper's largest case: a 65B LM on DCI, 81 layers x 8192 wide x 7,500 items, float32:
20 GB on disk. `prh align` streams the file one layer at a time (prh.metrics.files.
file_layer_states), so its peak memory should be about one N x D layer (245 MB) times a
few working copies plus Python and torch, whatever L. Requirement: under 4 GB.

The file is written in chunks of items (never held whole), aligned with itself by the real
`prh align` command in a child process (mutual_knn, k = 10, quantile 0.95, one thread), the
child's peak resident set read with getrusage(RUSAGE_CHILDREN) (the parent only writes the
file; /usr/bin/time -v on this VM reports nonsense, 13 MB for a process holding 1 GB), and the
file is deleted afterwards, also when the run fails.

    OMP_NUM_THREADS=1 python benchmarks/bench_align_memory.py                    # 81 x 8192 x 7,500: 20 GB
    OMP_NUM_THREADS=1 python benchmarks/bench_align_memory.py --items 1000       # 2.7 GB, a few minutes
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def write_synthetic(path: Path, *, items: int, layers: int, width: int, chunk_items: int, seed: int) -> None:
    """A safetensors file with one F32 tensor ``feats`` (items x layers x width), written chunk by chunk.

    Items share a low-rank signal that drifts with depth (so neighbour sets are not random),
    plus noise and a heavy tail on a few coordinates (so the clamp quantile matters).
    """
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(layers, 32, width, generator=g) / 32**0.5
    shape = [items, layers, width]
    header = json.dumps({"feats": {"dtype": "F32", "shape": shape, "data_offsets": [0, items * layers * width * 4]}})
    header = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        for start in range(0, items, chunk_items):
            n = min(chunk_items, items - start)
            z = torch.randn(n, 1, 32, generator=g)
            x = torch.einsum("nlr,lrd->nld", z.expand(n, layers, 32), basis) + torch.randn(n, layers, width, generator=g)
            x[:, :, :4] *= 20
            f.write(x.contiguous().numpy().tobytes())
    (path.with_suffix(".json")).write_text(json.dumps({"model": "synthetic", "shape": shape}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=7500)
    p.add_argument("--layers", type=int, default=81)
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--chunk-items", type=int, default=64, help="items generated and written at once")
    p.add_argument("--dir", default=None, help="where the synthetic file goes (default: a temp dir)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_align_memory.", dir=args.dir))
    feats = root / "synthetic.safetensors"
    try:
        t0 = time.time()
        write_synthetic(feats, items=args.items, layers=args.layers, width=args.width,
                        chunk_items=args.chunk_items, seed=args.seed)
        size_gb = feats.stat().st_size / 1e9
        print(f"wrote {feats} ({args.items} x {args.layers} x {args.width} float32, {size_gb:.2f} GB) "
              f"in {time.time() - t0:.0f} s", flush=True)
        cmd = ["prh", "align", "--metric", "mutual_knn", "--topk", "10", "--quantile", "0.95",
               "--x-names", "synthetic", "--x-features", str(feats), "--threads", str(args.threads),
               "--out", str(root / "table.json")]
        t0 = time.time()
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
        seconds = time.time() - t0
        if run.returncode:
            sys.exit(f"prh align failed ({run.returncode}):\n{run.stderr[-3000:]}")
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        table = json.loads((root / "table.json").read_text())
        print(f"prh align: {seconds:.0f} s, peak RSS {peak_gib:.2f} GiB; "
              f"one layer is {args.items * args.width * 4 / 2**30:.3f} GiB, the file {size_gb / 1.073741824:.2f} GiB; "
              f"self-alignment {table['scores'][0][0]:.3f} at layers {table['best_pairs'][0][0]}")
        print("PASS" if peak_gib < 4 / 1.073741824 else "FAIL", "(requirement: peak under 4 GB)")
    finally:
        shutil.rmtree(root)  # the synthetic file is never left behind
        print(f"deleted {root}")


if __name__ == "__main__":
    main()
