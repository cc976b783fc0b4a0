"""First GPU run of the certified bf16 k-NN (knn_fast) and of the engine's 'auto' precision at N up to 1e6.
Times knn(precision='bf16'|'fp32'), checks lists equal fp32 at N <= 1e5, and mutual k-NN of a latent pair at 1e6.
Usage: PYTHONPATH=src python3 benchmarks/device/knn_first_contact.py OUT.json [--tiny]; its H200 run (main at 48172df) is 2026-11-27-h200-knn_bf16.json"""

import json
import sys
import time
import torch
from prh.metrics.knn import knn
from prh.metrics.knn_fast import knn_fast

OUT = sys.argv[1]
TINY = "--tiny" in sys.argv
DEV = "cpu" if TINY else "cuda"
RES = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "rows": []}


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def save():
    json.dump(RES, open(OUT, "w"), indent=1, default=str)


def pair(n, d=768, z=64, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    lat = torch.randn(n, z, device=DEV, generator=g)
    out = []
    for _ in range(2):
        x = lat @ torch.randn(z, d, device=DEV, generator=g) + 0.5 * torch.randn(n, d, device=DEV, generator=g)
        out.append(torch.nn.functional.normalize(x, dim=1))
    return out


def mutual(ia, ib):
    k = ia.shape[1]
    return ((ia.unsqueeze(2) == ib.unsqueeze(1)).any(2).sum(1).float() / k).mean().item()


sizes = [2000, 4000] if TINY else [10_000, 100_000, 300_000, 1_000_000]
knn(torch.randn(1000, 768, device=DEV), 10, precision="bf16")
sync()
for n in sizes:
    a, b = pair(n)
    row = {"n": n, "k": 10}
    for name, x in (("a", a), ("b", b)):
        if DEV == "cuda":
            torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        i, s, st = knn_fast(x, 10, precision="bf16")
        sync()
        row[f"bf16_{name}_s"] = round(time.perf_counter() - t0, 3)
        row[f"bf16_{name}_stats"] = {
            "retried": st.retried,
            "fallback": st.fallback,
            "candidates": st.candidates,
            "block_rows": st.block_rows,
        }
        if DEV == "cuda":
            row[f"bf16_{name}_peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if name == "a":
            ia = i
        else:
            ib = i
        if n <= 100_000:
            sync()
            t0 = time.perf_counter()
            i32, _ = knn(x, 10, precision="fp32")
            sync()
            row[f"fp32_{name}_s"] = round(time.perf_counter() - t0, 3)
            row[f"{name}_lists_equal_sets"] = bool((i32.sort(1).values == i.sort(1).values).all())
    row["mutual_knn_bf16"] = mutual(ia, ib)
    RES["rows"].append(row)
    print(row, flush=True)
    save()
    del a, b, ia, ib
save()
