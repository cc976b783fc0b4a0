"""A LLaMA-family hub repo that ships only a SentencePiece model.

The three ``openlm-research/open_llama_*`` repos hold ``tokenizer.model`` (SentencePiece BPE with byte
fallback), ``tokenizer_config.json`` naming ``LlamaTokenizer``, and no ``tokenizer.json``. Transformers 5
builds its (Rust) ``LlamaTokenizer`` from the ``.model`` file through ``SentencePieceExtractor``, which
needs both ``sentencepiece`` and ``protobuf``; without them it falls back to a tiktoken reader and fails.
Here a tiny SentencePiece model is trained offline, a tiny random ``LlamaForCausalLM`` is saved beside it
in the same file layout as open_llama, the folder is put in an offline hub cache under the open_llama
repo id at a pinned revision, and the project's loader must load it, tokenize exactly as SentencePiece
does (the reference tokenizer open_llama recommends) and extract features and bits-per-byte.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from prh.models import loaders

REPO, REV = "openlm-research/open_llama_3b", "c" * 40
CORPUS = [
    "a red cube to the left of a small blue ball",
    "the green cone is big and sits above the yellow cylinder",
    "two purple spheres on a grey background, 3 of them",
    "an image with the caption of a dog. This is an image of a",
    "numbers 12 and 345 next to 6789 in the corner",
] * 20
# open_llama's tokenizer_config.json (no tokenizer.json, no "legacy" key: the slow, SentencePiece one)
TOKENIZER_CONFIG = {
    "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
    "model_max_length": 2048, "pad_token": None, "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
    **{k: {"__type": "AddedToken", "content": v, "lstrip": False, "normalized": True, "rstrip": False,
           "single_word": False} for k, v in (("bos_token", "<s>"), ("eos_token", "</s>"), ("unk_token", "<unk>"))},
}


@pytest.fixture(scope="module")
def spm_file(tmp_path_factory):
    """A SentencePiece BPE model trained here with LLaMA's options (byte fallback, split digits, no normalisation)."""
    import sentencepiece as spm

    tmp = tmp_path_factory.mktemp("spm")
    (tmp / "corpus.txt").write_text("\n".join(CORPUS) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(tmp / "corpus.txt"), model_prefix=str(tmp / "tokenizer"), model_type="bpe", vocab_size=340,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True, character_coverage=1.0, unk_id=0, bos_id=1,
        eos_id=2, pad_id=-1, num_threads=1, minloglevel=2,
    )
    return tmp / "tokenizer.model"


@pytest.fixture
def open_llama_like(tmp_path, spm_file, monkeypatch):
    """An offline hub cache holding REPO at REV with open_llama's files: config, weights, tokenizer.model."""
    import sentencepiece as spm
    from huggingface_hub import constants
    from transformers import LlamaConfig, LlamaForCausalLM

    cache = tmp_path / "hf_cache"
    snap = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / REV
    torch.manual_seed(0)
    vocab = spm.SentencePieceProcessor(model_file=str(spm_file)).get_piece_size()
    LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                                 bos_token_id=1, eos_token_id=2, pad_token_id=0)).save_pretrained(snap)
    shutil.copy(spm_file, snap / "tokenizer.model")
    (snap / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))
    (snap / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                              "unk_token": "<unk>"}))
    assert not (snap / "tokenizer.json").exists()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return snap


def test_sentencepiece_only_llama_repo_loads_tokenizes_like_sentencepiece_and_extracts(open_llama_like, spm_file):
    import sentencepiece as spm

    from prh.evaluation.likelihood import bits_per_byte
    from prh.features import PRH_PROMPT, extract_language_features

    model, tok = loaders.load_language_model(REPO, revision=REV)
    assert type(model).__name__ == "LlamaForCausalLM"
    sp = spm.SentencePieceProcessor(model_file=str(spm_file))
    texts = ["a red cube to the left of a small blue ball", "numbers 1234 and  two   spaces",
             " a leading space", "ünïcode café — bytes", "line one\nline two ",
             PRH_PROMPT.replace("{caption}", "a grey dog")]
    for text in texts:  # <s> then exactly SentencePiece's pieces (byte fallback for unseen characters)
        assert tok(text)["input_ids"] == [sp.bos_id(), *sp.encode(text)], text
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    # text around a special token: each side encoded alone, as transformers 4's slow LlamaTokenizer did
    # for open_llama's config (no "legacy" key, so legacy=True)
    assert tok("a cube</s>red ball")["input_ids"] == [sp.bos_id(), *sp.encode("a cube"), sp.eos_id(),
                                                      *sp.encode("red ball")]
    assert tok.pad_token is not None

    feats = extract_language_features(model, tok, texts, batch_size=2, progress=False)
    assert feats.shape == (len(texts), 3, 16) and torch.isfinite(feats).all()
    alone = extract_language_features(model, tok, texts[:1], progress=False)
    torch.testing.assert_close(feats[:1], alone, atol=1e-5, rtol=1e-5)  # padding changes nothing
    bpb = bits_per_byte(model, tok, texts, progress=False)
    assert bpb.shape == (len(texts),) and bool((bpb > 0).all())


def test_sentencepiece_and_protobuf_are_declared_dependencies(repo_root):
    """Transformers' SentencePieceExtractor requires both backends (``requires_backends``)."""
    import tomllib

    deps = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split("=")[0].split("<")[0].split(">")[0].split("[")[0].strip().lower() for d in deps}
    assert {"sentencepiece", "protobuf"} <= names
