"""Features as the authors compute them. platonic-rep's own extraction code (tests/reference/platonic_rep,
commit dcd76ba, unmodified) runs on a tiny Llama and a tiny ViT here, on the CPU, and what it saves must equal this
project's features to 1e-5. Differences by design are listed in docs/paper_suite.md ("Features as the authors
compute them")."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import CORPUS, save_language_model

from prh.features import extract_language_features, extract_vision_features
from prh.models.loaders import load_language_model

REF = Path(__file__).resolve().parent / "reference" / "platonic_rep"
MODULES = ("extract_features", "models", "utils", "tasks")


@pytest.fixture
def reference(monkeypatch):
    """The authors' extract_features module, importable from its folder, its CUDA calls no-ops (the CPU here)."""
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(REF))
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)  # its clean-up after each model
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    module = importlib.import_module("extract_features")
    yield module
    for name in MODULES:
        sys.modules.pop(name, None)


def _args(tmp_path, pool):
    return argparse.Namespace(output_dir=str(tmp_path / "ref"), dataset="prh", subset="wit_1024", pool=pool,
                              prompt=False, caption_idx=0, force_remake=True, qlora=False, force_download=False,
                              batch_size=2)


def _saved(reference, tmp_path, name, pool):
    path = reference.utils.to_feature_filename(str(tmp_path / "ref"), "prh", "wit_1024", name, pool=pool)
    return torch.load(path, weights_only=True)


def test_language_features_equal_the_authors_extract_llm_features(reference, tmp_path):
    """Mean-pooled hidden states of every layer, embeddings included, over the valid tokens (the authors pad on the
    left to the longest caption of the whole set; RoPE attention is invariant to that shift)."""
    lm = save_language_model("llama", tmp_path / "lm")
    texts = [CORPUS[0], CORPUS[1] + " and " + CORPUS[2], "two spheres", CORPUS[3]]
    reference.extract_llm_features([str(lm)], [{"text": [t]} for t in texts], _args(tmp_path, "avg"))
    ref = _saved(reference, tmp_path, str(lm), "avg")["feats"]
    model, tok = load_language_model(lm)
    ours = extract_language_features(model, tok, texts, pooling="mean", batch_size=3, device="cpu",
                                     dtype=torch.float32, progress=False)
    assert ref.shape == ours.shape == (4, model.config.num_hidden_layers + 1, model.config.hidden_size)
    torch.testing.assert_close(ours, ref.float(), atol=1e-5, rtol=1e-5)


def test_vision_features_equal_the_authors_extract_lvm_features(reference, tmp_path, monkeypatch):
    """The class token of every block's output (the authors' `blocks.{i}.add_1` nodes), through timm's eval
    transform of the model's own pretrained config."""
    import timm
    from PIL import Image

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=24,
                              depth=3, num_heads=2, num_classes=5).eval()
    data_cfg = {"input_size": (3, 32, 32), "interpolation": "bicubic", "mean": (0.4, 0.5, 0.6),
                "std": (0.2, 0.25, 0.3), "crop_pct": 1.0, "crop_mode": "center"}
    model.pretrained_cfg = {**model.pretrained_cfg, **data_cfg}
    monkeypatch.setattr(reference.timm, "create_model", lambda name, pretrained=False, **kw: model)
    images = np.random.default_rng(0).integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)
    dataset = [{"image": Image.fromarray(im)} for im in images]
    reference.extract_lvm_features(["vit_tiny_patch8_32"], dataset, _args(tmp_path, "cls"))
    ref = _saved(reference, tmp_path, "vit_tiny_patch8_32", "cls")["feats"]
    ours = extract_vision_features(model, images, pooling="cls", mean=data_cfg["mean"], std=data_cfg["std"],
                                   input_size=data_cfg["input_size"], interpolation="bicubic", crop_pct=1.0,
                                   batch_size=3, device="cpu", dtype=torch.float32, progress=False)
    assert ref.shape == ours.shape == (4, 3, 24)
    torch.testing.assert_close(ours, ref.float(), atol=1e-5, rtol=1e-5)


def test_an_absolute_position_lm_differs_by_design_on_left_padded_captions(reference, tmp_path):
    """The one difference by design: the authors pad every caption on the left to the longest of the set and pass no
    position ids, so under absolute position embeddings (GPT-2) a shorter caption is read at shifted positions; here
    positions come from the mask. The longest caption (no padding) agrees; the padded ones do not. BLOOM (ALiBi) and
    the RoPE models, every language model of the paper's sets, are shift-invariant (the Llama test above)."""
    lm = save_language_model("gpt2", tmp_path / "lm")
    texts = [CORPUS[0], CORPUS[1] + " and " + CORPUS[2], "two spheres", CORPUS[3]]
    reference.extract_llm_features([str(lm)], [{"text": [t]} for t in texts], _args(tmp_path, "avg"))
    ref = _saved(reference, tmp_path, str(lm), "avg")["feats"].float()
    model, tok = load_language_model(lm)
    ours = extract_language_features(model, tok, texts, pooling="mean", batch_size=3, device="cpu",
                                     dtype=torch.float32, progress=False)
    torch.testing.assert_close(ours[1], ref[1], atol=1e-5, rtol=1e-5)  # the longest: no padding, same positions
    assert all((ours[i] - ref[i]).abs().max() > 1e-2 for i in (0, 2, 3))
