"""Peak memory of mutual_knn at scale: two single-layer feature sets of N x D, on CPU.

The k-NN search (prh.metrics.knn.knn) holds one block of rows of the similarity
matrix at a time (about 2^24 floats = 64 MiB), never the N x N matrix
(N = 100,000: 40 GB in float32). Peak memory is read from the kernel's
high-water mark of resident memory (getrusage ru_maxrss), which counts numpy and
torch CPU allocations alike.

    OMP_NUM_THREADS=1 python benchmarks/bench_knn_scale.py              # N=100,000 x 1024
    OMP_NUM_THREADS=1 python benchmarks/bench_knn_scale.py --n 20000    # a quick check
"""

import argparse
import resource
import time

import torch

from prh.metrics import layer_states, pair_scores


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="items")
    p.add_argument("--d", type=int, default=1024, help="feature width")
    p.add_argument("--topk", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    shared = torch.randn(args.n, 64, generator=g)
    # two related single-layer models, so the score is far from chance: B sees A's first 64 dims
    feats_a = torch.randn(args.n, 1, args.d, generator=g)
    feats_a[:, 0, :64] += 2 * shared
    feats_b = torch.randn(args.n, 1, args.d, generator=g)
    feats_b[:, 0, :64] += 2 * shared
    del shared
    data_gib = 2 * feats_a.numel() * 4 / 2**30
    base = peak_rss_gib()
    t0 = time.perf_counter()
    state_a = layer_states("mutual_knn", feats_a, topk=args.topk, progress=True)
    state_b = layer_states("mutual_knn", feats_b, topk=args.topk, progress=True)
    score = pair_scores("mutual_knn", state_a, state_b).item()
    seconds = time.perf_counter() - t0
    peak = peak_rss_gib()
    print(f"N={args.n} D={args.d} k={args.topk} threads={args.threads}")
    print(f"mutual_knn = {score:.4f} (chance k/(N-1) = {args.topk / (args.n - 1):.2e})")
    print(f"time: {seconds:.1f} s   flops: {2 * 2 * args.n**2 * args.d / 1e12:.1f} TFLOP -> {4 * args.n**2 * args.d / seconds / 1e9:.0f} GFLOP/s")
    print(f"peak RSS: {peak:.2f} GiB total; {base:.2f} GiB after making the data ({data_gib:.2f} GiB of features);")
    print(f"          the metric itself added {peak - base:.2f} GiB; an N x N float32 matrix would be {args.n**2 * 4 / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
