"""The artifact writers: atomic, strict JSON, no pickles."""

import json
import os

import numpy as np
import pytest
import torch

from prh.io import (
    atomic_path,
    load_features,
    read_json,
    save_features,
    sha256_file,
    write_json,
)


def test_write_json_is_strict_json_with_null_for_undefined_values(tmp_path):
    write_json(tmp_path / "m.json", {"a": float("nan"), "b": [1.5, float("inf")], "c": np.float32(2.5), "d": np.arange(2)})
    text = (tmp_path / "m.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == {
        "a": None, "b": [1.5, None], "c": 2.5, "d": [0, 1]
    }


def test_a_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    write_json(tmp_path / "m.json", {"old": 1})
    with pytest.raises(TypeError):
        write_json(tmp_path / "m.json", {"bad": object()})
    assert read_json(tmp_path / "m.json") == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_outputs_are_readable_by_others(tmp_path):
    with atomic_path(tmp_path / "f.txt") as tmp:
        tmp.write_text("x")
    assert os.stat(tmp_path / "f.txt").st_mode & 0o044 == 0o044


def test_features_round_trip_with_meta(tmp_path):
    feats = torch.randn(5, 3, 4)
    save_features(tmp_path / "m.safetensors", feats, {"model": "m"})
    back, meta = load_features(tmp_path / "m.safetensors", with_meta=True)
    assert torch.equal(back, feats)
    assert meta["model"] == "m" and meta["shape"] == [5, 3, 4]
    with pytest.raises(ValueError, match="N x L x D"):
        save_features(tmp_path / "bad.safetensors", feats[0], {})
    with pytest.raises(FileNotFoundError, match="make pull"):
        load_features(tmp_path / "missing.safetensors")


def test_sha256_file(tmp_path):
    (tmp_path / "x").write_bytes(b"abc")
    assert sha256_file(tmp_path / "x") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
