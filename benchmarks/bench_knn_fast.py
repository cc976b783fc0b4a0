"""k-NN search: knn's fp32 search against the certified low-precision one.

For each device (the CPU, and CUDA when available) and each N: one layer of N × D unit
features (synthetic, ``--data``), k neighbours, timed as

* ``fp32``: ``knn(x, k)`` with default blocks (``knn.block_rows_for``: 2^24 elements on a
  CPU, memory-sized on CUDA); on CUDA also ``fp32_cpu_blocks``, the old 2^24-element blocks;
* ``bf16``: ``knn_fast(x, k, precision="bf16")`` (CUDA: bf16 GEMM, float32 output), and on
  CUDA ``bf16_out_bf16`` (bf16 output: less for torch.topk to read, a wider bound) and
  ``tf32``.

Each fast run reports the rows retried with more candidates and the rows that fell back to a
full search, and is checked against ``fp32``: rows whose lists differ, and the largest float64
similarity gap between the two lists at a differing place (a near-tie within fp32 rounding when
it is ~1e-7; anything larger would be a bug). Ratios are fp32 seconds / fast seconds. No
assertions. ``--json`` writes every record.

    python benchmarks/bench_knn_fast.py                        # CPU, N = 10^4 and 3·10^4, 1 thread
    python benchmarks/bench_knn_fast.py --cuda-n 100000 300000 --json knn_fast.json   # a GPU session
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F

from prh.metrics.knn import BLOCK_ELEMENTS, knn
from prh.metrics.knn_fast import knn_fast


def features(kind: str, n: int, d: int, device, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        x = torch.randn(n, d, generator=g)
    elif kind == "clustered":  # 50 items per centre
        centres = torch.randn(max(1, n // 50), d, generator=g)
        x = centres[torch.randint(0, len(centres), (n,), generator=g)] + 0.5 * torch.randn(n, d, generator=g)
    elif kind == "aniso":  # a shared mean and a low-rank part, as real features have
        low_rank = torch.randn(n, 32, generator=g) @ torch.randn(32, d, generator=g)
        x = 3 * torch.randn(1, d, generator=g) + 0.5 * low_rank + torch.randn(n, d, generator=g)
    else:
        raise ValueError(kind)
    return F.normalize(x.to(device), dim=1)


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - t0


def compare(x, ref, idx) -> dict:
    differ = torch.nonzero((ref != idx).any(dim=1)).flatten()
    sets = int((ref.sort(dim=1).values != idx.sort(dim=1).values).any(dim=1).sum())
    gap = 0.0
    if len(differ):
        x64 = x[differ].double()
        a = torch.einsum("nd,nkd->nk", x64, x[ref[differ]].double())
        b = torch.einsum("nd,nkd->nk", x64, x[idx[differ]].double())
        gap = float((a - b).abs().max())
    return {"rows_differ": len(differ), "sets_differ": sets, "max_f64_gap_at_differing_places": gap}


def run(device, n: int, d: int, k: int, kind: str, repeat: int) -> list[dict]:
    x = features(kind, n, d, device)
    methods = [("fp32", lambda: knn(x, k), None)]
    if device.type == "cuda":
        methods.append(("fp32_cpu_blocks", lambda: knn(x, k, block_rows=max(1, BLOCK_ELEMENTS // n)), None))
    methods.append(("bf16", lambda: knn_fast(x, k, precision="bf16"), "bf16"))
    if device.type == "cuda":
        methods.append(("bf16_out_bf16", lambda: knn_fast(x, k, precision="bf16", bf16_output=True), "bf16"))
        methods.append(("tf32", lambda: knn_fast(x, k, precision="tf32"), "tf32"))
    records, ref, base = [], None, None
    for name, fn, precision in methods:
        best, out = float("inf"), None
        for _ in range(repeat):
            out, seconds = timed(fn, device)
            best = min(best, seconds)
        rec = {"device": str(device), "n": n, "d": d, "k": k, "data": kind, "method": name, "seconds": best}
        if device.type == "cuda":
            rec["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        if precision is None:
            if name == "fp32":
                ref, base = out[0], best
            else:
                rec.update(compare(x, ref, out[0]))
        else:
            stats = out[2]
            rec.update(retried=stats.retried, fallback=stats.fallback, fallback_fraction=stats.fallback_fraction,
                       candidates=stats.candidates, block_rows=stats.block_rows, **compare(x, ref, out[0]))
        rec["speedup_vs_fp32"] = base / best
        records.append(rec)
        extra = "" if precision is None else (f"  retried {rec['retried']}, fallback {rec['fallback']} "
                                              f"({100 * rec['fallback_fraction']:.3f} %)")
        check = "" if name == "fp32" else (f"  differ {rec['rows_differ']} rows ({rec['sets_differ']} sets), "
                                           f"max f64 gap {rec['max_f64_gap_at_differing_places']:.1e}")
        print(f"{device.type:4s} N={n:>7} {kind:9s} {name:15s} {best:8.3f} s  x{base / best:5.2f}{extra}{check}",
              flush=True)
    return records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[10_000, 30_000], help="items on the CPU")
    p.add_argument("--cuda-n", type=int, nargs="+", default=[10_000, 30_000, 100_000], help="items on CUDA")
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--topk", type=int, default=10)
    p.add_argument("--data", nargs="+", default=["random", "clustered", "aniso"])
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    p.add_argument("--repeat", type=int, default=1, help="runs per method, the fastest kept")
    p.add_argument("--devices", nargs="+", default=["cpu", "cuda"], help="cuda is skipped when unavailable")
    p.add_argument("--json", help="write the records here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    records = []
    for name in args.devices:
        if name == "cuda" and not torch.cuda.is_available():
            print("cuda: not available, skipped")
            continue
        device = torch.device(name)
        if device.type == "cuda":
            print(f"cuda: {torch.cuda.get_device_name(device)}")
            knn_fast(features("random", 2048, args.d, device), args.topk)  # warm up cuBLAS
        else:
            print(f"cpu: {args.threads} thread(s)")
        for n in args.cuda_n if device.type == "cuda" else args.n:
            for kind in args.data:
                records += run(device, n, args.d, args.topk, kind, args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "torch": torch.__version__, "records": records}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
