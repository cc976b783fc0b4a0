"""Sharded exact k-NN: row shards merged equal the unsharded search, ties included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prh.io import load_features, save_features
from prh.metrics.files import file_layer_states
from prh.metrics.knn import knn
from prh.metrics.knn_shard import main_merge, main_shard, merge_shards, read_lists, shard_rows
from prh.metrics.registry import prepare_features


def features_with_ties(path, n=700, layers=2, dim=12, seed=0):
    """Random features in which a third of the items repeat others exactly (exact ties in every list)
    and a few are zero (dead units: equal similarity to everything)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, layers, dim, generator=g)
    copies = torch.randint(0, n // 2, (n // 3,), generator=g)
    x[n - n // 3:] = x[copies]
    x[:5] = 0.0
    save_features(path, x, {"model": "test"})
    return path


@pytest.mark.parametrize("n,shards,block_rows", [(1, 1, 1), (10, 3, 3), (700, 4, 64), (700, 11, 64), (5, 5, 1)])
def test_shard_rows_cover_every_row_once_on_block_edges(n, shards, block_rows):
    rows = shard_rows(n, shards, block_rows)
    assert len(rows) == shards and rows[0][0] == 0 and rows[-1][1] == n
    assert all(a < b for a, b in rows) and all(b == c for (_, b), (c, _) in zip(rows, rows[1:]))
    assert all(a % block_rows == 0 for a, _ in rows)


def test_shard_rows_refuses_more_shards_than_blocks():
    with pytest.raises(ValueError, match="blocks"):
        shard_rows(10, 4, 4)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_merged_shards_equal_the_unsharded_search(tmp_path, precision):
    feats = features_with_ties(tmp_path / "m.safetensors")
    k, block_rows, shards = 15, 64, 4
    paths = []
    for s in reversed(range(shards)):  # any order
        paths.append(str(tmp_path / f"shard{s}.safetensors"))
        main_shard(["--features", str(feats), "--shard", str(s), "--shards", str(shards), "--topk", str(k),
                    "--block-rows", str(block_rows), "--precision", precision, "--out", paths[-1]])
    main_merge([*paths, "--out", str(tmp_path / "merged.safetensors")])
    idx, sims, meta = read_lists(tmp_path / "merged.safetensors")
    assert meta["n"] == 700 and meta["layers"] == 2 and meta["shards"] == shards
    # the alignment's own search of the same file, unsharded: the same lists
    states, _, _ = file_layer_states(["mutual_knn"], feats, topk=k, block_rows=block_rows, knn_precision=precision)
    assert torch.equal(idx, states["mutual_knn"])
    # and the in-memory path (prepare_features, normalise, knn): the same lists and similarities, bit for bit
    prepared = prepare_features(load_features(feats), q=0.95)
    ties = 0
    for layer in range(2):
        ref_idx, ref_sims = knn(F.normalize(prepared[:, layer], dim=1), k, block_rows=block_rows, precision=precision)
        assert torch.equal(idx[layer], ref_idx) and torch.equal(sims[layer], ref_sims)
        ties += int((sims[layer][:, 1:] == sims[layer][:, :-1]).sum())
    assert ties > 100  # the lists do hold exact ties, and they came out in the same order


def test_merge_refuses_shards_that_do_not_belong_together(tmp_path):
    feats = features_with_ties(tmp_path / "m.safetensors", n=200)
    args = ["--features", str(feats), "--shards", "3", "--topk", "5", "--block-rows", "16"]
    for s in range(3):
        main_shard([*args, "--shard", str(s), "--out", str(tmp_path / f"s{s}.safetensors")])
    main_shard([*args[:-2], "--block-rows", "8", "--shard", "2", "--out", str(tmp_path / "other.safetensors")])
    s = [str(tmp_path / f"s{i}.safetensors") for i in range(3)]
    with pytest.raises(ValueError, match="missing or given twice"):
        merge_shards(s[:2], tmp_path / "out.safetensors")
    with pytest.raises(ValueError, match="missing or given twice"):
        merge_shards([*s, s[1]], tmp_path / "out.safetensors")
    with pytest.raises(ValueError, match="block_rows"):
        merge_shards([*s[:2], str(tmp_path / "other.safetensors")], tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()
