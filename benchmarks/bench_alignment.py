"""The all-layer-pairs engine against the direct per-pair method (PRH appendix A-B).

Setting of the issue: N = 1024 items, model A = 33 layers x 4096 dims (a 7B
language model), model B = 25 layers x 1024 dims (a ViT-L), k = 10.

* engine: ``layer_pair_scores``: per layer once (one N x N Gram block, top-k),
  then only set intersections per layer pair;
* direct: what the reference code does for every one of the 33 x 25 pairs:
  both layers' similarity matrices, a full argsort (mutual_knn) or top-k
  (cknna), N x N masks. It is timed on ``--pairs`` sampled pairs and
  extrapolated to all 825 (its time per pair does not depend on which pair);
  the engine's scores are compared with it on those pairs.

The floor is the flops of the per-layer Gram matrices, 2 N^2 (33*4096 + 25*1024),
at this machine's measured float32 matmul speed.

    OMP_NUM_THREADS=1 python benchmarks/bench_alignment.py [--pairs 6] [--threads 1]
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from prh.metrics import layer_pair_scores


def direct_knn(f, k):
    return (f @ f.T).fill_diagonal_(-1e8).argsort(dim=1, descending=True)[:, :k]


def direct_mutual_knn(a, b, k):
    n = a.shape[0]
    rows = torch.arange(n)[:, None]
    mask_a, mask_b = torch.zeros(n, n), torch.zeros(n, n)
    mask_a[rows, direct_knn(a, k)] = 1.0
    mask_b[rows, direct_knn(b, k)] = 1.0
    return ((mask_a * mask_b).sum(dim=1) / k).mean().item()


def hsic_unbiased(K, L):
    m = K.shape[0]
    Kt, Lt = K.clone().fill_diagonal_(0), L.clone().fill_diagonal_(0)
    value = (Kt * Lt.T).sum() + Kt.sum() * Lt.sum() / ((m - 1) * (m - 2)) - 2 * (Kt @ Lt).sum() / (m - 2)
    return value / (m * (m - 3))


def direct_cknna(a, b, k):
    K, L = a @ a.T, b @ b.T

    def align(K, L):
        mk = torch.zeros_like(K).scatter_(1, K.clone().fill_diagonal_(float("-inf")).topk(k, dim=1).indices, 1)
        ml = torch.zeros_like(L).scatter_(1, L.clone().fill_diagonal_(float("-inf")).topk(k, dim=1).indices, 1)
        return hsic_unbiased(mk * ml * K, mk * ml * L)

    return (align(K, L) / torch.sqrt(align(K, K) * align(L, L))).item()


def matmul_gflops(n, d, repeats=3):
    x = torch.randn(n, d)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x @ x.T
        best = min(best, time.perf_counter() - t)
    return 2 * n * n * d / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--pairs", type=int, default=6, help="layer pairs timed with the direct method")
    p.add_argument("--topk", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    n, k = args.n, args.topk
    g = torch.Generator().manual_seed(0)
    shared = torch.randn(n, 256, generator=g)
    # layers share a latent (scores well above chance) plus layer-specific noise (no ties)
    feats_a = torch.randn(n, 33, 4096, generator=g)
    feats_a[:, :, :256] += shared[:, None, :] * torch.linspace(0.2, 2.0, 33)[None, :, None]
    feats_b = torch.randn(n, 25, 1024, generator=g)
    feats_b[:, :, :256] += shared[:, None, :] * torch.linspace(2.0, 0.2, 25)[None, :, None]
    gflops = matmul_gflops(n, 4096)
    floor = 2 * n * n * (33 * 4096 + 25 * 1024) / gflops / 1e9
    print(f"N={n}, A=33x4096, B=25x1024, k={k}, threads={args.threads}; matmul {gflops:.0f} GFLOP/s")
    print(f"floor (per-layer Grams, {2 * n * n * (33 * 4096 + 25 * 1024) / 1e9:.0f} GFLOP): {floor:.1f} s")
    rng = np.random.default_rng(0)
    sample = [(int(i), int(j)) for i, j in zip(rng.integers(0, 33, args.pairs), rng.integers(0, 25, args.pairs))]
    for metric, direct in (("mutual_knn", direct_mutual_knn), ("cknna", direct_cknna)):
        t = time.perf_counter()
        res = layer_pair_scores(metric, feats_a, feats_b, topk=k)
        engine_s = time.perf_counter() - t
        t = time.perf_counter()
        want = [direct(F.normalize(feats_a[:, i], dim=1), F.normalize(feats_b[:, j], dim=1), k) for i, j in sample]
        per_pair = (time.perf_counter() - t) / len(sample)
        direct_s = per_pair * 33 * 25
        diff = max(abs(res.scores[i, j] - w) for (i, j), w in zip(sample, want))
        print(
            f"{metric:>10}: engine {engine_s:6.1f} s | direct {per_pair:.2f} s/pair x 825 = {direct_s:6.0f} s "
            f"| ratio {direct_s / engine_s:5.1f}x | engine / floor {engine_s / floor:4.2f} "
            f"| max |diff| {diff:.1e} | best {res.best_score:.4f} at {res.best_pair}"
        )


if __name__ == "__main__":
    main()
