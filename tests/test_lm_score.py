"""The language-modelling score (PRH Fig. 3's x-axis) on a tiny GPT-2 and a tiny local corpus."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import CORPUS, save_language_model

from prh.evaluation.lm_score import (
    chunk_text,
    lm_score,
    merge_lm_scores,
    merge_main,
    sample_openwebtext,
)
from prh.io import read_json, read_jsonl, write_json

DOCS = [f"document {i}: " + " ".join(CORPUS[i % 4].split()[: 3 + i % 5] * (1 + i % 7)) for i in range(40)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """An OpenWebText-like corpus folder: one ``text`` column, split train."""
    root = tmp_path_factory.mktemp("owt")
    with open(root / "train.jsonl", "w") as f:
        for d in DOCS:
            f.write(json.dumps({"text": d}) + "\n")
    return root


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return save_language_model("gpt2", tmp_path_factory.mktemp("gpt2"))


def test_chunk_text_cuts_at_whitespace():
    text = "aaa bbb ccc\ndddd eeeeeeeeeeee f"
    pieces = chunk_text(text, 8)
    assert all(0 < len(p) <= 8 for p in pieces)
    # the last whitespace within the limit; a word longer than the limit is cut inside
    assert pieces == ["aaa bbb", "ccc\ndddd", "eeeeeeee", "eeee f"]
    assert "".join("".join(pieces).split()) == "".join(text.split())  # nothing but whitespace is lost
    assert chunk_text("  short  ", 100) == ["short"]
    assert chunk_text("", 5) == []
    with pytest.raises(ValueError, match="max_chars=0"):
        chunk_text("x", 0)


def test_sample_is_seeded_and_sized(corpus, tmp_path):
    kw = dict(repo=str(corpus), revision=None, n_bytes=600, chunk_chars=40, shuffle_buffer=16)
    m1 = sample_openwebtext(tmp_path / "a", seed=1, **kw)
    m2 = sample_openwebtext(tmp_path / "b", seed=1, **kw)
    m3 = sample_openwebtext(tmp_path / "c", seed=2, **kw)
    a = read_jsonl(tmp_path / "a" / "texts.jsonl")
    assert m1["sha256"] == m2["sha256"] != m3["sha256"]
    sizes = [len(r["text"].encode()) for r in a]
    assert all(len(r["text"]) <= 40 for r in a)
    # stops with the piece that reaches n_bytes
    assert sum(sizes) >= 600 and sum(sizes) - sizes[-1] < 600
    assert m1["n_bytes"] == sum(sizes) and m1["n_texts"] == len(a) == a[-1]["id"] + 1
    # every piece comes from a corpus document, documents whole and in shuffled order
    assert all(any(r["text"] in d for d in DOCS) for r in a)
    with pytest.raises(ValueError, match="holds only"):
        sample_openwebtext(tmp_path / "d", seed=0, **{**kw, "n_bytes": 10**7})


def test_lm_score_equals_direct_cross_entropy(corpus, gpt2, tmp_path):
    sample_openwebtext(tmp_path / "s", repo=str(corpus), revision=None, n_bytes=500, chunk_chars=60,
                       shuffle_buffer=8, seed=0)
    r = lm_score(tmp_path / "s", tmp_path / "out" / "gpt2.json", model=str(gpt2), name="tiny-gpt2",
                 batch_size=3, device="cpu", dtype="float32", progress=False)
    assert read_json(tmp_path / "out" / "gpt2.json") == r
    assert not (tmp_path / "out" / "gpt2.json.partial").exists()

    # direct: each piece after one start token, summed nats over summed bytes
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    tok = AutoTokenizer.from_pretrained(gpt2)
    texts = [t["text"] for t in read_jsonl(tmp_path / "s" / "texts.jsonl")]
    nats, nbytes = 0.0, 0
    with torch.no_grad():
        for t in texts:
            ids = torch.tensor([[tok.eos_token_id] + tok(t, add_special_tokens=False)["input_ids"]])
            logits = model(ids).logits[0, :-1]
            nats += F.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
            nbytes += len(t.encode("utf-8"))
    bpb = nats / math.log(2) / nbytes
    assert r["bpb"] == pytest.approx(bpb, rel=1e-5)
    assert r["lm_score"] == pytest.approx(1 - bpb, rel=1e-5)
    assert r["n_bytes"] == nbytes and r["n_texts"] == len(texts) and r["model"] == "tiny-gpt2"
    assert r["sample"]["sha256"] == read_json(tmp_path / "s" / "meta.json")["sha256"]
    # a random 300-token model is far from the data: about log2(300) bits per token
    assert 0.5 < r["bpb"] < 10 and np.isfinite(r["lm_score"])


def test_lm_score_refuses_an_encoder(corpus, tmp_path):
    from tiny_models import save_encoder

    sample_openwebtext(tmp_path / "s", repo=str(corpus), revision=None, n_bytes=50, chunk_chars=60, seed=0)
    with pytest.raises(ValueError, match="not a causal LM"):
        lm_score(tmp_path / "s", tmp_path / "x.json", model=str(save_encoder(tmp_path / "bert")), device="cpu")


def test_missing_corpus_names_the_remedies(tmp_path):
    from prh.errors import DatasetNotAvailableError

    with pytest.raises(DatasetNotAvailableError, match="dvc pull results/data"):
        sample_openwebtext(tmp_path / "s", repo=str(tmp_path / "nowhere"), n_bytes=10)


def test_merge_lm_scores_gathers_models_for_convergence(tmp_path):
    sample = {"repo": "Skylion007/openwebtext", "revision": "main", "split": "train", "seed": 0, "sha256": "abc"}
    write_json(tmp_path / "a.json", {"model": "lm-a", "bpb": 1.25, "lm_score": -0.25, "n_params": 100,
                                     "sample": sample})
    write_json(tmp_path / "b.json", {"model": "lm-b", "lm_score": 0.375, "n_params": 200, "sample": sample})
    out = tmp_path / "language.json"
    merge_main(["--scores", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out),
                "--n-params", '{"lm-b": 250}'])
    r = read_json(out)
    # b holds only the score: bpb = 1 - 0.375; --n-params overrides b's count only
    assert r["models"] == {"lm-a": {"bpb": 1.25, "lm_score": -0.25, "n_params": 100},
                           "lm-b": {"bpb": 0.625, "lm_score": 0.375, "n_params": 250}}
    assert r["source"] == "lm_score" and r["sample"]["sha256"] == "abc"
    assert r["files"] == {"lm-a": str(tmp_path / "a.json"), "lm-b": str(tmp_path / "b.json")}
    # what run_convergence reads from the language JSON
    assert {m: v["bpb"] for m, v in r["models"].items() if v.get("bpb") is not None} == {"lm-a": 1.25, "lm-b": 0.625}


def test_merge_lm_scores_refuses_incomparable_or_broken_files(tmp_path):
    write_json(tmp_path / "a.json", {"model": "m", "bpb": 1.0, "sample": {"sha256": "abc"}})
    write_json(tmp_path / "other.json", {"model": "o", "bpb": 1.0, "sample": {"sha256": "def"}})
    write_json(tmp_path / "empty.json", {"model": "e", "n_params": 3})
    with pytest.raises(ValueError, match="different text samples"):
        merge_lm_scores([tmp_path / "a.json", tmp_path / "other.json"], tmp_path / "x.json")
    with pytest.raises(ValueError, match="model 'm' is in both"):
        merge_lm_scores([tmp_path / "a.json", tmp_path / "a.json"], tmp_path / "x.json")
    with pytest.raises(ValueError, match="neither 'bpb' nor 'lm_score'"):
        merge_lm_scores([tmp_path / "empty.json"], tmp_path / "x.json")
    with pytest.raises(ValueError, match=r"n_params names \['typo'\]"):
        merge_lm_scores([tmp_path / "a.json"], tmp_path / "x.json", n_params={"typo": 1})
    with pytest.raises(ValueError, match="paths is empty"):
        merge_lm_scores([], tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_a_script_based_corpus_names_itself_and_the_parquet_fix(tmp_path):
    """OpenWebText's main branch is a loading script; the pinned `datasets` refuses scripts with a
    RuntimeError that named neither the corpus nor a way out, and it blocked all 20 lm_score jobs. The default revision
    is now the hub's parquet conversion, and a script-based corpus gives one error that says so."""
    import yaml

    from prh.config import schema_defaults
    from prh.errors import DatasetNotAvailableError

    corpus = tmp_path / "owt"
    corpus.mkdir()
    (corpus / "owt.py").write_text("import datasets  # a loading script, as Skylion007/openwebtext's main holds\n")
    with pytest.raises(DatasetNotAvailableError, match=r"script-based dataset.*refs/convert/parquet"):
        sample_openwebtext(tmp_path / "s", repo=str(corpus), revision=None, n_bytes=10)
    assert not (tmp_path / "s").exists()
    params = yaml.safe_load(open(__file__.replace("tests/test_lm_score.py", "params.yaml")))
    assert params["paper"]["lm_score"]["revision"] == schema_defaults("paper")["lm_score"]["revision"] \
        == "refs/convert/parquet"
