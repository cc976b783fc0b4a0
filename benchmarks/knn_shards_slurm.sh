#!/bin/bash
# Sharded exact k-NN through the test cluster against one unsharded search, by hand:
#   sudo benchmarks/knn_shards_slurm.sh [N] [D] [SHARDS] [WORKDIR]    (defaults 100000 384 4 /tmp/prh-knn-shards)
# Random N x D features (one layer, 10 % exact copies of others: ties), `prh knn-shard` as a SLURM job array
# of SHARDS one-thread jobs and `prh knn-merge` as a job after them, timed from submission to the merge's end;
# then the same search unsharded, one thread, here; then whether the two lists are identical. Starts and stops
# tests/slurm/cluster.sh (root). Run from the repository root with `prh` on PATH.
set -euo pipefail
N=${1:-100000}; DIM=${2:-384}; SHARDS=${3:-4}; D=${4:-/tmp/prh-knn-shards}
CLUSTER="$(cd "$(dirname "$0")/.." && pwd)/tests/slurm/cluster.sh"
mkdir -p "$D"
python - "$N" "$DIM" "$D/model.safetensors" <<'PY'
import sys
import torch
from prh.io import save_features
n, dim, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
g = torch.Generator().manual_seed(0)
x = torch.randn(n, 1, dim, generator=g)
x[n - n // 10:] = x[torch.randint(0, n // 2, (n // 10,), generator=g)]  # 10 % exact copies: ties
save_features(out, x, {"model": "random"})
PY
"$CLUSTER" start
eval "$("$CLUSTER" env)"
trap '"$CLUSTER" stop' EXIT
t0=$(date +%s.%N)
A=$(sbatch --parsable --array=0-$((SHARDS - 1)) --ntasks 1 --cpus-per-task 1 --mem 4000 -t 600 -D "$D" -o "$D/shard_%a.log" \
  --wrap "prh knn-shard --features $D/model.safetensors --shard \$SLURM_ARRAY_TASK_ID --shards $SHARDS --topk 10 --threads 1 --out $D/shard_\$SLURM_ARRAY_TASK_ID.safetensors")
parts=$(for s in $(seq 0 $((SHARDS - 1))); do printf '%s ' "$D/shard_$s.safetensors"; done)
M=$(sbatch --parsable --dependency=afterok:$A --ntasks 1 --mem 8000 -t 60 -D "$D" -o "$D/merge.log" \
  --wrap "prh knn-merge $parts --out $D/merged.safetensors")
while :; do s=$(squeue -h -t all -j "$M" -o %T); case $s in PENDING|RUNNING|CONFIGURING|COMPLETING|"") sleep 2;; *) break;; esac; done
t1=$(date +%s.%N)
echo "merge job $s; sharded: $(echo "$t1 - $t0" | bc) s from submission ($SHARDS one-thread jobs on $(nproc) CPUs, then the merge)"
squeue -h -t all -o "%i %T %M"
t2=$(date +%s.%N)
prh knn-shard --features "$D/model.safetensors" --shard 0 --shards 1 --topk 10 --threads 1 --out "$D/whole.safetensors"
t3=$(date +%s.%N)
echo "unsharded (one thread): $(echo "$t3 - $t2" | bc) s"
python - "$D" <<'PY'
import sys
import torch
from prh.metrics.knn_shard import read_lists
a, b = (read_lists(f"{sys.argv[1]}/{name}.safetensors") for name in ("merged", "whole"))
print("identical lists:", torch.equal(a[0], b[0]), "identical similarities:", torch.equal(a[1], b[1]))
print("adjacent exactly equal similarities in the lists (ties):", int((a[1][..., 1:] == a[1][..., :-1]).sum()))
PY
