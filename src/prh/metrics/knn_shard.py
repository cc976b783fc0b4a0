"""A model's exact k-NN lists computed in row shards, one job per shard, and merged.

Beyond about N = 10^6 one device no longer holds a model's search in reasonable time; the rows are
independent, so the search splits by rows. Shard s of S searches the rows ``shard_rows(N, S, B)[s]``
of every layer against all N items (each job reads every layer whole: the candidates), and
``merge_shards`` stacks the shards' lists in row order. The result is **identical** to the unsharded
``knn.knn(x, k, block_rows=B)`` of each layer, ties and last bits included, because a shard runs the
very same blocks: shard boundaries fall on multiples of B, and ``knn(..., rows=...)`` runs the blocks
``[start, start + B), ...`` exactly as the full search does (a GEMM's rounding, and torch.topk's order
among exactly equal similarities, may depend on a block's shape: equal blocks make them equal).
B is therefore fixed for the whole search (``--block-rows``; default ``default_block_rows``: the 64 MiB
rule of ``knn_fast.block_rows_for`` without its RAM-dependent part, so that every job computes the same
B) and recorded in every shard; the merge refuses shards that disagree on it, on N, k, the layers, the
clamp, the precision or the features file (its SHA-256), and any missing or repeated row.

Each layer is prepared as the alignment does (``files.file_layer_states``): clamped to ±c, c the
``quantile`` of |x| over the whole file (every shard computes the same c from the same file), cast to
float32, L2-normalised per item. Shard files are safetensors: ``idx`` (L × rows × k, int64) and ``sims``
(L × rows × k, float32) with the settings in the header's metadata; the merged file has the same keys
over all N rows.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from prh.io import atomic_path, read_features_layer, sha256_file
from prh.metrics.files import clamp_bound
from prh.metrics.knn import knn
from prh.metrics.knn_fast import BLOCK_ELEMENTS
from prh.metrics.registry import as_tensor

__all__ = ["default_block_rows", "knn_shard", "main_merge", "main_shard", "merge_shards", "shard_rows"]

# settings every shard of one search must share
SHARED_KEYS = ("n", "topk", "layers", "block_rows", "precision", "quantile", "clamp", "features_sha256")


def default_block_rows(n: int) -> int:
    """Rows per block that every job derives alike from N: 2^24 similarities (64 MiB of float32), 1 ≤ B ≤ N."""
    return max(1, min(n, BLOCK_ELEMENTS // max(1, n)))


def shard_rows(n: int, shards: int, block_rows: int) -> list[tuple[int, int]]:
    """The rows (start, stop) of each of ``shards`` shards: whole blocks of ``block_rows``, as even as blocks allow."""
    blocks = math.ceil(n / block_rows)
    if not 1 <= shards <= blocks:
        raise ValueError(f"shards must be between 1 and the {blocks} blocks of {block_rows} rows of N = {n}, got {shards}")
    edges = [round(i * blocks / shards) * block_rows for i in range(shards + 1)]
    return [(start, min(n, stop)) for start, stop in zip(edges, edges[1:])]


def _layers(path, *, quantile: float, n_items: int | None):
    """(settings, one prepared layer after another) of a features file, as ``files.file_layer_states`` prepares them."""
    c, n, n_layers, layout = clamp_bound(path, quantile=quantile, n_items=n_items)

    def layers():
        for layer in range(n_layers):
            x = read_features_layer(path, layer, n_items=n, layout=layout)
            x = as_tensor(x if c is None else x.clamp(-c, c), ndim=2, name=str(path), dtype=torch.float32)
            yield F.normalize(x, dim=1)

    return {"n": n, "layers": n_layers, "quantile": quantile, "clamp": c}, layers()


def knn_shard(features, out, *, shard: int, shards: int, topk: int, quantile: float = 0.95,
              block_rows: int | None = None, precision: str = "fp32", n_items: int | None = None) -> dict:
    """Write shard ``shard`` of ``shards`` of a features file's k-NN lists (every layer) to ``out``; return its settings."""
    settings, layers = _layers(features, quantile=quantile, n_items=n_items)
    n = settings["n"]
    block_rows = block_rows or default_block_rows(n)
    if not 0 <= shard < shards:
        raise ValueError(f"shard must be between 0 and shards - 1 = {shards - 1}, got {shard}")
    start, stop = shard_rows(n, shards, block_rows)[shard]
    idx, sims = [], []
    for x in layers:
        i, s = knn(x, topk, block_rows=block_rows, precision=precision, rows=(start, stop))
        idx.append(i)
        sims.append(s)
    meta = {**settings, "topk": topk, "block_rows": block_rows, "precision": precision,
            "features_sha256": sha256_file(features), "shard": shard, "shards": shards, "start": start, "stop": stop}
    _save(out, torch.stack(idx), torch.stack(sims), meta)
    return meta


def _save(path, idx: torch.Tensor, sims: torch.Tensor, meta: dict) -> None:
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({"idx": idx.contiguous(), "sims": sims.contiguous()}, str(tmp), metadata={"prh": json.dumps(meta)})


def read_lists(path) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(idx, sims, settings) of a shard or merged file."""
    from safetensors import SafetensorError, safe_open

    from prh.errors import CorruptFileError

    if Path(path).is_dir():
        raise IsADirectoryError(errno.EISDIR, "a directory, not a k-NN lists file", str(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["prh"])
            return f.get_tensor("idx"), f.get_tensor("sims"), meta
    except (SafetensorError, KeyError, TypeError, json.JSONDecodeError) as err:
        raise CorruptFileError(path, "k-NN lists file (prh knn-shard)", err) from err


def merge_shards(paths, out) -> dict:
    """Stack shard files (any order) into one file of every row's lists; refuse any that do not belong together."""
    parts = [read_lists(p) for p in paths]
    if not parts:
        raise ValueError("no shard files to merge")
    first = parts[0][2]
    for p, (_, _, meta) in zip(paths, parts):
        differ = {k: (first.get(k), meta.get(k)) for k in SHARED_KEYS + ("shards",) if meta.get(k) != first.get(k)}
        if differ:
            raise ValueError(f"{p} is not a shard of the same search as {paths[0]}: {differ}")
    parts.sort(key=lambda part: part[2]["start"])
    expected = shard_rows(first["n"], first["shards"], first["block_rows"])
    got = [(m["start"], m["stop"]) for _, _, m in parts]
    if got != expected:
        raise ValueError(f"the shards cover rows {got}; a search of {first['shards']} shards needs {expected} "
                         "(a shard missing or given twice)")
    idx = torch.cat([i for i, _, _ in parts], dim=1)
    sims = torch.cat([s for _, s, _ in parts], dim=1)
    meta = {k: first[k] for k in SHARED_KEYS} | {"shards": first["shards"]}
    _save(out, idx, sims, meta)
    return meta


def main_shard(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh knn-shard", description="one row shard of a model's exact k-NN lists "
                                "(every layer, against all N items); `prh knn-merge` joins the shards")
    p.add_argument("--features", required=True, help="features file (safetensors, N x L x D)")
    p.add_argument("--shard", type=int, required=True, help="this shard, 0 .. shards-1 (e.g. $SLURM_ARRAY_TASK_ID)")
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--block-rows", type=int, default=None,
                   help="rows per block, the same for every shard (default: 2^24 // N)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "tf32"))
    p.add_argument("--n-items", type=int, default=None, help="the first n items only")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, OMP_NUM_THREADS)")
    p.add_argument("--out", required=True)
    settings = add_slice(p, {"alignment": ("topk", "quantile")})  # the alignment tables' k and clamp
    a = p.parse_args(argv)
    if a.threads:
        from prh.device import set_threads

        set_threads(a.threads)
    c = settings(a)["alignment"]
    meta = knn_shard(a.features, a.out, shard=a.shard, shards=a.shards, **c, block_rows=a.block_rows,
                     precision=a.precision, n_items=a.n_items)
    print(f"{a.out}: rows {meta['start']}..{meta['stop'] - 1} of {meta['n']}, {meta['layers']} layer(s), "
          f"k = {c['topk']}")


def main_merge(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh knn-merge", description="join the row shards of `prh knn-shard` into one "
                                "file of every item's k-NN lists, checking that they belong together")
    p.add_argument("shards", nargs="+", help="the shard files, in any order")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    meta = merge_shards(a.shards, a.out)
    print(f"{a.out}: {meta['n']} rows from {meta['shards']} shards ({os.path.basename(a.shards[0])}, ...)")
