"""prh.standin.models: every hub model of params.yaml gets a tiny stand-in that the REAL loaders load
offline, as the real repo (architecture class, config keys, tokenizer kind), and whose features extract.

All stand-ins (the ~63 ``paper.models`` and the bridge's ``gpt2``) are built once into a tmp hub cache
(seconds); each is then loaded with HF_HUB_OFFLINE=1 through ``prh.models.loaders`` and run through
``prh.features``. Determinism is checked across processes: a second build in a fresh interpreter (its
own hash seed, its own tokenizer training) must give the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from prh.models import loaders
from prh.pin import hub_entries
from prh.standin.cache import STANDIN_NOTE, repo_folder
from prh.standin.models import (
    LANGUAGE_FAMILIES,
    VISION_ARGS,
    build_model_standin,
    build_model_standins,
    model_family,
    standin_note,
)

ROOT = Path(__file__).resolve().parents[1]
CFG = yaml.safe_load((ROOT / "params.yaml").read_text())
MODELS = [e for e in hub_entries(CFG, include_unset=True) if e["kind"] == "model"]
SPECS = (CFG.get("paper") or {}).get("models") or {}


def spec_of(entry):
    return SPECS.get(entry["key"].removeprefix("paper.models.")) if entry["key"].startswith("paper.models.") else None


# family: (class the loader returns, tokenizer model, files the snapshot has, files it must not have,
#          special tokens the tokenizer must name)
LANGUAGE = {
    "bloom": ("BloomForCausalLM", "BPE", {"tokenizer.json"}, {"tokenizer.model", "vocab.json"},
              {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}),
    "open_llama": ("LlamaForCausalLM", "BPE", {"tokenizer.model"}, {"tokenizer.json"},
                   {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "llama": ("LlamaForCausalLM", "BPE", {"tokenizer.model", "tokenizer.json"}, set(),
              {"bos_token": "<s>", "eos_token": "</s>"}),
    "olmo": ("OlmoForCausalLM", "BPE", {"tokenizer.json"}, {"tokenizer.model"},
             {"eos_token": "<|endoftext|>", "pad_token": "<|padding|>"}),
    "gemma": ("GemmaForCausalLM", "BPE", {"tokenizer.model", "tokenizer.json"}, set(),
              {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
    "mistral": ("MistralForCausalLM", "BPE", {"tokenizer.model", "tokenizer.json"}, set(),
                {"bos_token": "<s>", "eos_token": "</s>"}),
    "mixtral": ("MixtralForCausalLM", "BPE", {"tokenizer.model", "tokenizer.json"}, set(),
                {"bos_token": "<s>", "eos_token": "</s>"}),
    "llama3": ("LlamaForCausalLM", "BPE", {"tokenizer.json"}, {"tokenizer.model"},
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
    "llama3-instruct": ("LlamaForCausalLM", "BPE", {"tokenizer.json"}, {"tokenizer.model"},
                        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "bert": ("BertModel", "WordPiece", {"vocab.txt", "tokenizer.json"}, set(),
             {"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "pad_token": "[PAD]"}),
    "distilbert": ("DistilBertModel", "WordPiece", {"vocab.txt", "tokenizer.json"}, set(),
                   {"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}),
    "roberta": ("RobertaModel", "BPE", {"vocab.json", "merges.txt", "tokenizer.json"}, set(),
                {"cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>", "pad_token": "<pad>"}),
    "simcse": ("RobertaModel", "BPE", {"vocab.json", "merges.txt"}, {"tokenizer.json"},
               {"cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>"}),
    "gpt2": ("GPT2LMHeadModel", "BPE", {"vocab.json", "merges.txt", "tokenizer.json"}, set(),
             {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
    "albert": ("AlbertModel", "Unigram", {"spiece.model", "tokenizer.json"}, set(),
               {"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "pad_token": "<pad>"}),
    "xlnet": ("XLNetLMHeadModel", "Unigram", {"spiece.model", "tokenizer.json"}, set(),
              {"cls_token": "<cls>", "sep_token": "<sep>", "mask_token": "<mask>", "pad_token": "<pad>"}),
}
VISION = {"vit_": "VisionTransformer", "deit_": "VisionTransformer", "resnet": "ResNet", "convnext_": "ConvNeXt",
          "swin_": "SwinTransformer", "mixer_": "MlpMixer", "efficientnet_": "EfficientNet"}
TEXTS = ["a red cube to the left of a small blue ball", "Two dogs, 1234 café!", "x"]


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """Every model stand-in of params.yaml, in one tmp hub cache: (cache, records)."""
    cache = tmp_path_factory.mktemp("standin_hub")
    return cache, build_model_standins(CFG, cache)


@pytest.fixture
def offline(standins, monkeypatch):
    """Offline mode on the stand-in cache, as a process started with HF_HUB_OFFLINE=1 and HF_HUB_CACHE set."""
    from huggingface_hub import constants

    cache, _ = standins
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_every_hub_model_of_params_has_a_family():
    assert len(MODELS) >= 60 and any(e["repo_id"] == "gpt2" and e["key"].startswith("bridge.") for e in MODELS)
    families = {model_family(e, spec_of(e)) for e in MODELS}
    assert families == {"vision", *LANGUAGE_FAMILIES} and set(LANGUAGE) == set(LANGUAGE_FAMILIES)
    for e in MODELS:
        if model_family(e, spec_of(e)) == "vision":
            arch = e["repo_id"].removeprefix("timm/").split(".")[0]
            assert any(arch.startswith(p) for p, _ in VISION_ARGS) and any(arch.startswith(p) for p in VISION)
    with pytest.raises(ValueError, match="someone/unknown-lm"):
        model_family({"repo_id": "someone/unknown-lm"})
    with pytest.raises(ValueError, match="levit_128"):
        model_family({"repo_id": "timm/levit_128.fb_dist_in1k"}, {"modality": "vision"})


def test_one_snapshot_per_repo_each_marked_as_stand_in(standins):
    cache, records = standins
    assert len(records) == len({(e["repo_id"], e["revision"]) for e in MODELS})
    for r in records:
        snap = Path(r["snapshot"])
        assert r["kind"] == "model" and snap.is_dir() and snap.parent.parent == repo_folder(cache, r["repo_id"])
        assert standin_note(snap) == STANDIN_NOTE
        assert "STAND-IN" in (snap / "README.md").read_text()
        assert (snap / "model.safetensors").is_file()
        assert (repo_folder(cache, r["repo_id"]) / "refs" / r["revision"]).read_text() == snap.name


@pytest.mark.parametrize("entry", MODELS, ids=[e["repo_id"] for e in MODELS])
def test_standin_loads_through_the_real_loader_and_extracts(entry, offline):
    from prh.features import extract_language_features, extract_vision_features

    family = model_family(entry, spec_of(entry))
    snap = next((repo_folder(offline, entry["repo_id"]) / "snapshots").iterdir())
    if family == "vision":
        import timm

        name = entry["repo_id"].removeprefix("timm/")
        model, pre = loaders.load_vision_model(name, entry["revision"])
        arch = name.split(".")[0]
        assert type(model).__name__ == next(cls for p, cls in VISION.items() if arch.startswith(p))
        assert json.loads((snap / "config.json").read_text())["architecture"] == arch
        real = timm.models.get_pretrained_cfg(name)  # preprocessing is the real tag's
        assert pre["input_size"] == list(real.input_size) and pre["mean"] == list(real.mean)
        assert pre["std"] == list(real.std) and pre["crop_pct"] == real.crop_pct
        assert pre["interpolation"] == real.interpolation
        assert pre["pooling"] == ("cls" if arch.startswith(("vit_", "deit_")) else "avg")
        images = np.random.default_rng(0).integers(0, 256, (2, 24, 24, 3), dtype=np.uint8)
        feats = extract_vision_features(model, images, progress=False, **pre)
        assert feats.shape[0] == 2 and feats.shape[1] >= 2 and torch.isfinite(feats).all()
        return

    cls, tok_model, has, lacks, specials = LANGUAGE[family]
    model, tok = loaders.load_language_model(entry["repo_id"], entry["revision"])
    assert type(model).__name__ == cls and not model.training
    assert model.config.prh_standin == STANDIN_NOTE and model.config.architectures == [LANGUAGE_FAMILIES[family][0]]
    assert model.config.model_type == LANGUAGE_FAMILIES[family][1] and model.config.num_hidden_layers in (2, 4)
    files = {p.name for p in snap.iterdir()}
    assert has <= files and not lacks & files, files
    assert type(tok.backend_tokenizer.model).__name__ == tok_model
    assert {k: str(getattr(tok, k)) for k in specials} == specials
    assert tok.pad_token_id is not None and len(tok) <= model.get_input_embeddings().num_embeddings
    if family == "xlnet":  # see test_xlnet_streamed_features: a forward pass stands in for the extraction
        batch = tok(TEXTS, return_tensors="pt", padding=True)
        with torch.no_grad():
            hidden = model(**batch, output_hidden_states=True).hidden_states
        assert len(hidden) == model.config.num_hidden_layers + 1 and all(torch.isfinite(h).all() for h in hidden)
        return
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        feats = extract_language_features(model, tok, TEXTS, batch_size=2, progress=False)
    # the streamed per-block hooks reproduce output_hidden_states (no fallback) on every family but XLNet
    assert not [w for w in caught if "falling back" in str(w.message)]
    assert feats.shape == (3, model.config.num_hidden_layers + 1, 32) and torch.isfinite(feats).all()
    if loaders.is_causal_lm(model.config):
        from prh.evaluation.likelihood import bits_per_byte

        bpb = bits_per_byte(model, tok, TEXTS[:2], progress=False)
        assert bpb.shape == (2,) and np.isfinite(bpb).all() and (bpb > 0).all()


def test_xlnet_features_fall_back_from_the_hooks(offline):
    """XLNet's blocks output T x B x D: the hooks pool another shape, and the check once crashed in
    torch.stack instead of falling back to output_hidden_states (the real XLNet too)."""
    from prh.features import extract_language_features

    model, tok = loaders.load_language_model("xlnet/xlnet-base-cased", "main")
    with pytest.warns(UserWarning, match="falling back to holding every hidden state"):
        feats = extract_language_features(model, tok, TEXTS, batch_size=2, progress=False)
    assert feats.shape == (3, 3, 32) and torch.isfinite(feats).all()


@pytest.mark.parametrize("repo", ["openlm-research/open_llama_3b", "huggyllama/llama-7b", "google/gemma-2b"])
def test_sentencepiece_families_tokenize_as_their_sentencepiece_model(repo, offline):
    import sentencepiece as spm

    snap = next((repo_folder(offline, repo) / "snapshots").iterdir())
    assert (snap / "tokenizer.json").exists() == (repo != "openlm-research/open_llama_3b")
    sp = spm.SentencePieceProcessor(model_file=str(snap / "tokenizer.model"))
    _, tok = loaders.load_language_model(repo, "main")
    for text in [*TEXTS, "numbers 1234 and  two   spaces", "line one\nline two "]:
        assert tok(text)["input_ids"] == [sp.bos_id(), *sp.encode(text)], text


def test_instruct_standin_has_a_chat_template_and_summarises(offline):
    from prh.studies.density.summarise import prompt_text, summarise_captions

    model, tok = loaders.load_language_model("meta-llama/Meta-Llama-3-8B-Instruct", "main")
    prompt = prompt_text(tok, "a red cube on a table", 5)
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    records = summarise_captions(model=model, tokenizer=tok, captions=["a red cube on a table", "two dogs"],
                                 num_words=[5], max_new_tokens=3, progress=False)
    assert len(records) == 2 and all(isinstance(r["text"], str) for r in records)
    _, base = loaders.load_language_model("meta-llama/Meta-Llama-3-8B", "main")
    assert not base.chat_template


def test_mixtral_standin_is_a_mixture_of_experts(offline):
    model, _ = loaders.load_language_model("mistralai/Mixtral-8x7B-v0.1", "main")
    assert model.config.num_local_experts == 8 and model.config.num_experts_per_tok == 2


def test_builds_are_byte_identical_across_processes_and_seeded(standins, tmp_path):
    cache, _ = standins
    one_each = {}
    for e in MODELS:
        family = model_family(e, spec_of(e))
        key = e["repo_id"].removeprefix("timm/").split("_")[0] if family == "vision" else family
        one_each.setdefault(key, e["repo_id"])
    again = tmp_path / "again"
    code = ("import sys, yaml; from prh.standin.models import build_model_standins; "
            "build_model_standins(yaml.safe_load(open(sys.argv[1])), sys.argv[2], only=sys.argv[3:])")
    subprocess.run([sys.executable, "-c", code, str(ROOT / "params.yaml"), str(again), *one_each.values()],
                   check=True, capture_output=True)
    for repo in one_each.values():
        first, second = repo_folder(cache, repo), repo_folder(again, repo)
        files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file()), repo
        for f in files:
            assert (first / f).read_bytes() == (second / f).read_bytes(), f"{repo}: {f} differs between builds"

    # another seed, other weights; two repos of one family differ too
    entry = next(e for e in MODELS if e["repo_id"] == "bigscience/bloomz-560m")
    other = build_model_standin(entry, spec_of(entry), tmp_path / "seed1", seed=1)
    base = next((repo_folder(cache, entry["repo_id"]) / "snapshots").iterdir())
    assert (other / "model.safetensors").read_bytes() != (base / "model.safetensors").read_bytes()
    sibling = next((repo_folder(cache, "bigscience/bloomz-1b1") / "snapshots").iterdir())
    assert (sibling / "model.safetensors").read_bytes() != (base / "model.safetensors").read_bytes()


def test_only_selects_by_name_or_repo_and_rejects_unknown_names(tmp_path):
    records = build_model_standins(CFG, tmp_path, only=["gpt2", "bert-base"])
    assert sorted(r["repo_id"] for r in records) == ["google-bert/bert-base-uncased", "gpt2"]
    with pytest.raises(ValueError, match="no-such-model"):
        build_model_standins(CFG, tmp_path, only=["no-such-model"])
    with pytest.raises(ValueError, match="dataset"):
        build_model_standin({"key": "datasets.x", "kind": "dataset", "repo_id": "a/b", "revision": "main"}, None, tmp_path)


def test_every_vision_stand_in_trains_on_channels_last_input():
    """Seed 000 backpropagates through prh.features' channels_last images; torch 2.14's CPU conv backward
    crashed the process on 8-channel ResNets (the first stand-ins), so each architecture runs one step
    in a child process (a crash there fails this test instead of the test run)."""
    import subprocess
    import sys

    script = (
        "import timm, torch\n"
        "from prh.standin.models import VISION_ARGS\n"
        "for name in ['resnet34', 'resnet50', 'convnext_small', 'swin_small_patch4_window7_224', "
        "'vit_small_patch16_224', 'mixer_b16_224', 'deit_base_patch16_224']:\n"
        "    args = next(a for p, a in VISION_ARGS if name.startswith(p))\n"
        "    m = timm.create_model(name, **args).eval()\n"
        "    x = torch.randn(4, 3, 224, 224).contiguous(memory_format=torch.channels_last)\n"
        "    m(x).sum().backward()\n"
        "print('all ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and "all ok" in r.stdout, r.stderr[-2000:]
