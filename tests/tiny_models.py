"""Tiny random checkpoints for the loader and extraction tests (no network, seconds on one core).

- ``make_tokenizer(kind)``: a byte-level BPE trained on a few captions, wrapped as a fast
  tokenizer the way each family behaves: ``llama`` adds ``<s>`` (BOS) in front,
  ``gpt2`` adds nothing and has no pad token, ``bloom`` adds nothing and pads on the left.
- ``save_language_model(kind, path)``: a 2-layer causal LM of that family + its tokenizer,
  ``save_pretrained`` to ``path``; ``save_encoder(path)``: a 2-layer BERT encoder.
- ``save_vision_zoo(kind, path)``: a timm ViT (2 blocks) or ResNet, saved per the zoo contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

CORPUS = [
    "a red cube to the left of a small blue ball",
    "the green cone is big and sits above the yellow cylinder",
    "two purple spheres on a grey background",
    "ünïcode café naïve — bytes matter",
] * 5


def make_tokenizer(kind: str):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    if kind == "llama":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 2)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                       pad_token="<pad>", padding_side="right")
    if kind == "gpt2":  # GPT-2: one <|endoftext|>-like token as BOS and EOS, no pad token
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", unk_token="<unk>")
    if kind == "bloom":
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                       pad_token="<pad>", padding_side="left")
    raise ValueError(kind)


def make_language_model(kind: str, vocab_size: int):
    from transformers import (
        BloomConfig,
        BloomForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_embd=16, n_layer=2, n_head=2, n_positions=128,
                                          bos_token_id=3, eos_token_id=3))
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32,
                                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                            max_position_embeddings=128, bos_token_id=2, eos_token_id=3,
                                            pad_token_id=0))
    if kind == "bloom":
        return BloomForCausalLM(BloomConfig(vocab_size=vocab_size, hidden_size=16, n_layer=2, n_head=2,
                                            bos_token_id=2, eos_token_id=3, pad_token_id=0))
    raise ValueError(kind)


def save_language_model(kind: str, path) -> Path:
    path = Path(path)
    tok = make_tokenizer(kind)
    make_language_model(kind, len(tok)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def save_encoder(path) -> Path:
    from transformers import BertConfig, BertModel

    path = Path(path)
    tok = make_tokenizer("llama")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


VISION_ZOO = {
    "vit": {"timm_name": "vit_tiny_patch16_224",
            "timm_kwargs": {"img_size": 32, "patch_size": 8, "embed_dim": 16, "depth": 2, "num_heads": 2,
                            "num_classes": 4}, "pooling": "cls"},
    "resnet": {"timm_name": "resnet18", "timm_kwargs": {"num_classes": 4}, "pooling": "avg"},
}


def save_vision_zoo(kind: str, path) -> Path:
    """A zoo vision checkpoint dir: config.json (the contract's keys) + model.safetensors."""
    import timm
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    spec = VISION_ZOO[kind]
    torch.manual_seed(0)
    model = timm.create_model(spec["timm_name"], pretrained=False, **spec["timm_kwargs"])
    cfg = {**spec, "input_size": [3, 32, 32], "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3],
           "train": {"epochs": 0, "note": "random init, made by the tests"}}
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path
