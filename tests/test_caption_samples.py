"""Caption samples: a shapes dataset stores K independently drawn densest captions
per scene without changing its images or other captions, and a scene's language features are
the mean over its captions' pooled features (bits per byte: total bits over total bytes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import CORPUS, save_encoder, save_language_model

from prh.batching import group_starts
from prh.data.captions import LEVELS, caption
from prh.data.shapes import build_dataset, caption_samples, make_item
from prh.evaluation.likelihood import bits_per_byte
from prh.extract import extract_language_dataset
from prh.features import extract_language_features
from prh.io import load_features, read_jsonl, write_jsonl
from prh.models.loaders import load_language_model

WORLD = {"image_size": 16, "supersample": 1}
# 3 items with 2, 1 and 3 captions, concatenated in item order
SAMPLES = [[CORPUS[0], "a"], [CORPUS[2]], [CORPUS[1], "two spheres", CORPUS[3]]]
FLAT = [t for s in SAMPLES for t in s]
COUNTS = [len(s) for s in SAMPLES]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("lms")
    return {"gpt2": save_language_model("gpt2", root / "gpt2"), "bert": save_encoder(root / "bert")}


# ---------------------------------------------------------------- dataset


def test_samples_leave_images_and_captions_byte_identical(tmp_path):
    one = build_dataset(tmp_path / "k1", n=3, seed=5, world={**WORLD, "caption_samples": 1})
    four = build_dataset(tmp_path / "k4", n=3, seed=5, world={**WORLD, "caption_samples": 4})
    assert (one / "images.npy").read_bytes() == (four / "images.npy").read_bytes()
    assert (one / "scenes.jsonl").read_bytes() == (four / "scenes.jsonl").read_bytes()
    images = np.load(four / "images.npy")
    for i, (r1, r4) in enumerate(zip(read_jsonl(one / "captions.jsonl"), read_jsonl(four / "captions.jsonl"))):
        image, texts, scene = make_item(i, seed=5, world=WORLD)  # the streams as before samples existed
        assert np.array_equal(images[i], image)
        assert r1["texts"] == r4["texts"] == texts and r1["text"] == r4["text"] == texts[-1]
        assert r1["samples"] == [texts[-1]] and len(r4["samples"]) == 4 and r4["samples"][0] == texts[-1]
        for j in (1, 2, 3):  # sample j from its own stream (seed, index, 100 + j)
            rng = np.random.default_rng([5, i, 100 + j])
            assert r4["samples"][j] == caption(scene, level=len(LEVELS) - 1, rng=rng)
    assert len({s for r in read_jsonl(four / "captions.jsonl") for s in r["samples"]}) > 3 * 2  # they differ
    assert json.loads((four / "meta.json").read_text())["params"]["world"]["caption_samples"] == 4


def test_bad_sample_count_is_refused(tmp_path):
    _, _, scene = make_item(0, seed=0, world=WORLD)
    for k in (0, 1.5, True):
        with pytest.raises(ValueError, match="caption_samples"):
            caption_samples(scene, index=0, seed=0, k=k)
    with pytest.raises(ValueError, match="caption_samples"):
        build_dataset(tmp_path / "bad", n=1, seed=0, world={**WORLD, "caption_samples": 0})


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_mean_over_samples_equals_mean_of_single_caption_features(models, kind):
    model, tok = load_language_model(models[kind])
    single = extract_language_features(model, tok, FLAT, batch_size=2, progress=False)
    mean = extract_language_features(model, tok, FLAT, batch_size=2, samples_per_item=COUNTS, progress=False)
    starts = [0, 2, 3, 6]
    expected = torch.stack([single[a:b].mean(0) for a, b in zip(starts[:-1], starts[1:])])
    assert mean.shape == (3, *single.shape[1:])
    torch.testing.assert_close(mean, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(mean[0], single[0], atol=1e-3)  # the second caption counts
    # K = 1 per item is the single-caption output, bit for bit
    assert torch.equal(extract_language_features(model, tok, FLAT, batch_size=2, samples_per_item=[1] * 6,
                                                 progress=False), single)


def test_bits_per_byte_over_samples_is_total_bits_over_total_bytes(models):
    model, tok = load_language_model(models["gpt2"])
    per_text = bits_per_byte(model, tok, FLAT, batch_size=2, progress=False)
    per_item = bits_per_byte(model, tok, FLAT, batch_size=2, samples_per_item=COUNTS, progress=False)
    nbytes = np.array([len(t.encode("utf-8")) for t in FLAT], dtype=float)
    expected = [(per_text[a:b] * nbytes[a:b]).sum() / nbytes[a:b].sum() for a, b in ((0, 2), (2, 3), (3, 6))]
    np.testing.assert_allclose(per_item, expected, rtol=1e-12)
    assert np.array_equal(bits_per_byte(model, tok, FLAT, batch_size=2, samples_per_item=[1] * 6,
                                        progress=False), per_text)


def _dataset(path, samples):
    write_jsonl(path / "captions.jsonl", [{"id": i, "text": s[0] if s else "x", "samples": s}
                                          for i, s in enumerate(samples)])
    return path


def test_cli_averages_samples_and_k1_equals_the_single_caption_run(models, tmp_path):
    from prh.cli import main

    data = _dataset(tmp_path / "data", SAMPLES)
    out = tmp_path / "mean.safetensors"
    main(["extract-language", "--model", str(models["gpt2"]), "--data", str(data), "--out", str(out),
          "--text-field", "samples", "--average-samples", "--language-batch-size", "2", "--no-progress"])
    feats, meta = load_features(out, with_meta=True)
    model, tok = load_language_model(models["gpt2"])
    torch.testing.assert_close(feats, extract_language_features(model, tok, FLAT, batch_size=2,
                                                                samples_per_item=COUNTS, progress=False))
    assert meta["text_field"] == "samples" and meta["average_samples"] is True
    assert meta["samples_per_item"] == {"min": 1, "max": 3, "total": 6}
    np.testing.assert_allclose(meta["bpb_per_item"], bits_per_byte(model, tok, FLAT, samples_per_item=COUNTS,
                                                                   progress=False), rtol=1e-6)
    assert not out.with_name("mean.safetensors.partial").exists()

    # one sample per item (world.caption_samples = 1): the old single-caption output exactly
    data1 = _dataset(tmp_path / "data1", [s[:1] for s in SAMPLES])
    runs = {}
    for name, flags in (("k1", ["--text-field", "samples", "--average-samples"]), ("text", [])):
        path = tmp_path / f"{name}.safetensors"
        main(["extract-language", "--model", str(models["gpt2"]), "--data", str(data1), "--out", str(path),
              "--language-batch-size", "2", "--no-progress", *flags])
        runs[name] = load_features(path, with_meta=True)
    assert torch.equal(runs["k1"][0], runs["text"][0])
    assert runs["k1"][1]["bpb_per_item"] == runs["text"][1]["bpb_per_item"]
    assert runs["text"][1]["average_samples"] is False and runs["text"][1]["samples_per_item"] is None


def test_clear_errors(models, tmp_path):
    data = _dataset(tmp_path / "data", SAMPLES)
    kw = {"model": models["gpt2"], "data": data, "out": tmp_path / "x.safetensors", "progress": False}
    with pytest.raises(ValueError, match="average_samples"):  # a list field needs one of the two
        extract_language_dataset(text_field="samples", **kw)
    with pytest.raises(ValueError, match="list field"):
        extract_language_dataset(text_field="text", average_samples=True, **kw)
    with pytest.raises(ValueError, match="drop text_index"):
        extract_language_dataset(text_field="samples", text_index=0, average_samples=True, **kw)
    empty = _dataset(tmp_path / "empty", [SAMPLES[0], []])
    with pytest.raises(ValueError, match="item 1 has no 'samples'"):
        extract_language_dataset(**{**kw, "data": empty}, text_field="samples", average_samples=True)
    with pytest.raises(ValueError, match="sums to 5"):
        group_starts([2, 3], 6)
    with pytest.raises(ValueError, match=">= 1"):
        group_starts([2, 0, 4], 6)
    assert group_starts(COUNTS, 6).tolist() == [0, 2, 3]
