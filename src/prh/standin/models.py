"""Stand-ins for the hub models of the paper suite: tiny, seeded, loadable by the real loaders.

For every hub model a config names (``prh.pin.hub_entries``, kind "model"), ``build_model_standins``
writes a repo snapshot into a local Hugging Face cache (``prh.standin.cache.write_snapshot``) that
``prh.models.loaders.load_language_model`` / ``load_vision_model`` load with ``HF_HUB_OFFLINE=1``
exactly as they load the real repo, so the paper DAG runs end to end on a machine with no hub:

- language: the real repo's architecture class (``architectures``), ``model_type`` and tokenizer kind
  (``prh.standin.tokenizers``: byte-level BPE, WordPiece, SentencePiece with or without tokenizer.json,
  with their special tokens), at hidden width 32, 2 layers, a vocabulary of a few hundred; config
  keys from the family's config class, so the loader's choices (causal LM or base model, pad token,
  rotary/ALiBi/absolute positions, MoE routing) are the real ones;
- vision: timm's own hub export (``save_for_hf``: ``architecture``, ``model_args``, ``num_classes``,
  ``num_features``, ``pretrained_cfg`` of the registry's tag, so preprocessing is the real one) of the
  named architecture, shrunk through ``model_args`` (``VISION_ARGS``) at the real input size.

Weights are random from a seed mixed with the repo id (two repos of one family differ; the same seed
gives byte-identical files). Every config carries ``STANDIN_NOTE`` (``prh_standin``) and every repo a
README.md saying it is a stand-in: their numbers mean nothing, only that the pipeline runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

import torch

from prh.pin import hub_entries
from prh.standin.cache import STANDIN_NOTE, write_snapshot
from prh.standin.tokenizers import tokenizer_files

__all__ = ["LANGUAGE_FAMILIES", "VISION_ARGS", "model_family", "build_model_standin", "build_model_standins", "standin_note"]

# Decoder LMs: width 32, 2 layers, 4 heads of 8 (GQA families keep fewer key/value heads than query heads).
_DEC = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
# Encoders get 4 blocks: the colour study's RoBERTa recipe concatenates the last four hidden states (appendix D).
_ENC = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2}
# family: (architecture class the real config names, model_type, tokenizer kind, config overrides);
# context lengths are the real ones (they cost nothing here and the LM scorer reads them).
LANGUAGE_FAMILIES = {
    "bloom": ("BloomForCausalLM", "bloom", "bloom", {"hidden_size": 32, "n_layer": 2, "n_head": 4}),
    "open_llama": ("LlamaForCausalLM", "llama", "llama-spm",
                   {**_DEC, "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6}),
    "llama": ("LlamaForCausalLM", "llama", "llama",
              {**_DEC, "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6}),
    "olmo": ("OlmoForCausalLM", "olmo", "gpt-neox", {**_DEC, "num_key_value_heads": 4, "max_position_embeddings": 2048}),
    "gemma": ("GemmaForCausalLM", "gemma", "gemma",
              {**_DEC, "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 8192}),
    "mistral": ("MistralForCausalLM", "mistral", "llama",
                {**_DEC, "num_key_value_heads": 2, "max_position_embeddings": 32768, "sliding_window": 4096}),
    "mixtral": ("MixtralForCausalLM", "mixtral", "llama",
                {**_DEC, "num_key_value_heads": 2, "max_position_embeddings": 32768, "sliding_window": None,
                 "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1e6}),
    "llama3": ("LlamaForCausalLM", "llama", "llama3",
               {**_DEC, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rope_theta": 500000.0}),
    "llama3-instruct": ("LlamaForCausalLM", "llama", "llama3-instruct",
                        {**_DEC, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rope_theta": 500000.0}),
    "bert": ("BertForMaskedLM", "bert", "wordpiece", {**_ENC, "max_position_embeddings": 512}),
    "distilbert": ("DistilBertForMaskedLM", "distilbert", "wordpiece",
                   {"dim": 32, "hidden_dim": 64, "n_layers": 2, "n_heads": 2, "max_position_embeddings": 512}),
    "roberta": ("RobertaForMaskedLM", "roberta", "roberta",
                {**_ENC, "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5}),
    # unsup-simcse-roberta-large: a bare RobertaModel with the GPT-2 vocab.json/merges.txt and no tokenizer.json
    "simcse": ("RobertaModel", "roberta", "roberta-vocab",
               {**_ENC, "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5}),
    "gpt2": ("GPT2LMHeadModel", "gpt2", "gpt2", {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 1024}),
    # ALBERT shares one layer group across its depth, as the real one (num_hidden_groups=1)
    "albert": ("AlbertForMaskedLM", "albert", "albert", {**_ENC, "embedding_size": 16, "max_position_embeddings": 512}),
    "xlnet": ("XLNetLMHeadModel", "xlnet", "xlnet", {"d_model": 32, "d_inner": 64, "n_layer": 2, "n_head": 2,
                                                    "mem_len": None}),
}
# (pattern on the lower-cased repo id, family): the first match wins, so the narrower patterns come first.
_LANGUAGE_REPOS = [
    (r"bigscience/bloomz?-.*", "bloom"), (r"openlm-research/open_llama_.*", "open_llama"),
    (r"huggyllama/llama-.*", "llama"), (r"allenai/olmo-.*-hf", "olmo"), (r"google/gemma-.*", "gemma"),
    (r"mistralai/mixtral-.*", "mixtral"), (r"mistralai/mistral-.*", "mistral"),
    (r"meta-llama/meta-llama-3-.*-instruct", "llama3-instruct"), (r"meta-llama/meta-llama-3-.*", "llama3"),
    (r"(distilbert/)?distilroberta-.*", "roberta"), (r"(distilbert/)?distilbert-.*", "distilbert"),
    (r"(google-bert/)?bert-.*", "bert"), (r".*/unsup-simcse-roberta-.*", "simcse"),
    (r"(facebookai/)?roberta-.*", "roberta"), (r"(openai-community/)?gpt2(-.*)?", "gpt2"),
    (r"microsoft/dialogpt-.*", "gpt2"), (r"(albert/)?albert-.*", "albert"), (r"(xlnet/)?xlnet-.*", "xlnet"),
]
# timm architecture prefix: the model_args that shrink it (the registry's entrypoint takes the rest).
VISION_ARGS = [
    ("vit_", {"embed_dim": 32, "depth": 2, "num_heads": 2}),  # ViT, DeiT-style, CLIP, MAE, DINOv2 towers
    ("deit_", {"embed_dim": 32, "depth": 2, "num_heads": 2}),
    # 16 channels at least: torch 2.14's CPU conv backward on a channels_last input (prh.features'
    # layout, which seed 000 trains through) crashed the process ("double free", segfault) with 8
    ("resnet", {"layers": [1, 1, 1, 1], "channels": [16, 32, 64, 128], "stem_width": 16}),
    ("convnext_", {"depths": [1, 1, 1, 1], "dims": [16, 32, 64, 128]}),
    ("swin_", {"embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2]}),
    # mixer_b16_224 fixes num_blocks and embed_dim in its entrypoint (model_args cannot override them):
    # only the MLP ratios shrink, so it keeps 12 blocks of width 768 (2.7M parameters, most in stem and head).
    ("mixer_", {"mlp_ratio": [0.125, 0.0625]}),
    # _gen_efficientnet fixes block_args, stem and head widths (model_args cannot override them): the
    # stand-in is the full-size architecture with random weights (B1 7.8M, B2 9.1M parameters).
    ("efficientnet_", {}),
]


def model_family(entry: dict, spec: dict | None = None) -> str:
    """The stand-in family of a hub model entry: ``"vision"`` (a timm name) or a ``LANGUAGE_FAMILIES`` key."""
    repo_id = entry["repo_id"]
    if (spec or {}).get("modality") == "vision" or repo_id.startswith("timm/"):
        arch = repo_id.removeprefix("timm/").split(".")[0]
        if not any(arch.startswith(prefix) for prefix, _ in VISION_ARGS):
            raise ValueError(f"vision model {repo_id!r}: no stand-in for timm architecture {arch!r}; "
                             f"known prefixes: {', '.join(p for p, _ in VISION_ARGS)}")
        return "vision"
    for pattern, family in _LANGUAGE_REPOS:
        if re.fullmatch(pattern, repo_id.lower()):
            return family
    raise ValueError(f"language model {repo_id!r}: no stand-in family matches it; "
                     f"known families: {', '.join(LANGUAGE_FAMILIES)}")


def _seed(seed: int, repo_id: str) -> int:
    """The torch seed of one repo: ``seed`` and the repo id, so two repos of a family get different weights."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{repo_id}".encode()).digest()[:4], "little")


def _write_language(family: str, folder: Path) -> None:
    """Config, weights (save_pretrained, safetensors) and tokenizer files of a tiny ``family`` model."""
    import transformers
    from transformers.utils import logging

    arch, model_type, kind, overrides = LANGUAGE_FAMILIES[family]
    files, ids = tokenizer_files(kind)
    tokens = {k: v for k, v in ids.items() if k != "unk_token_id" and v is not None}
    config = transformers.AutoConfig.for_model(model_type, **tokens, **overrides)
    config.prh_standin = STANDIN_NOTE  # an extra attribute: saved in config.json, ignored by the model
    model = getattr(transformers, arch)(config)
    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # a bar per tiny shard would drown the build's own output
    try:
        model.save_pretrained(folder)
    finally:
        if shown:
            logging.enable_progress_bar()
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _write_vision(name: str, folder: Path) -> None:
    """timm's hub export (config.json + model.safetensors) of ``name``'s architecture, shrunk by ``VISION_ARGS``."""
    import timm
    from timm.models import save_for_hf

    if not timm.is_model_pretrained(name):
        raise ValueError(f"vision model {name!r} is not a timm pretrained name (see timm.list_pretrained())")
    arch = name.split(".")[0]
    args = next(a for prefix, a in VISION_ARGS if arch.startswith(prefix))
    # img_size is left to the tag's pretrained config: the stand-in sees images at the real input size
    model = timm.create_model(name, pretrained=False, **args)
    save_for_hf(model, folder, model_config={"prh_standin": STANDIN_NOTE}, safe_serialization=True)


def _model_card(entry: dict, family: str, seed: int) -> str:
    library = "timm" if family == "vision" else "transformers"
    return (f"---\nlibrary_name: {library}\ntags:\n- prh-standin\n---\n\n"
            f"# STAND-IN for `{entry['repo_id']}` (revision `{entry.get('revision') or 'main'}`)\n\n"
            f"{STANDIN_NOTE}.\n\nStand-in family `{family}`, seed {seed}; written by `prh.standin.models`. "
            "Do not use it for anything but running the workflow offline.\n")


def build_model_standin(entry: dict, spec: dict | None, cache_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Write the stand-in of one hub model entry (a ``hub_entries`` record of kind "model"; ``spec`` its
    ``paper.models`` block, or None) into the hub cache ``cache_dir``; return the snapshot folder."""
    if entry.get("kind", "model") != "model":
        raise ValueError(f"entry {entry.get('key', entry['repo_id'])!r} is a {entry['kind']}, not a model")
    family = model_family(entry, spec)
    with tempfile.TemporaryDirectory(prefix="prh-standin-") as tmp, torch.random.fork_rng(devices=[]):
        folder = Path(tmp)
        torch.manual_seed(_seed(seed, entry["repo_id"]))
        if family == "vision":
            _write_vision(entry["repo_id"].removeprefix("timm/"), folder)
        else:
            _write_language(family, folder)
        (folder / "README.md").write_text(_model_card(entry, family, seed))
        return write_snapshot(cache_dir, entry["repo_id"], entry.get("revision"), folder)


def build_model_standins(cfg: dict, cache_dir: str | os.PathLike, *, only=None, seed: int = 0) -> list[dict]:
    """Stand-ins of every hub model of ``cfg`` (``paper.models`` and bridged hub models), one per distinct
    (repo_id, revision), in ``cache_dir``. ``only``: names of ``paper.models`` entries, entry keys or repo
    ids to build (None: all). Returns ``[{"repo_id", "revision", "kind", "snapshot"}]`` in config order."""
    def name(e):  # the paper.models name of an entry; None for a bridged model
        return e["key"].removeprefix("paper.models.") if e["key"].startswith("paper.models.") else None

    entries = [e for e in hub_entries(cfg, include_unset=True) if e["kind"] == "model"]
    if only is not None:
        wanted = {only} if isinstance(only, str) else set(only)
        unknown = sorted(wanted - {x for e in entries for x in (name(e), e["key"], e["repo_id"])})
        if unknown:
            raise ValueError(f"only={unknown}: no hub model of the config has that name, key or repo id")
        entries = [e for e in entries if wanted & {name(e), e["key"], e["repo_id"]}]
    models = (cfg.get("paper") or {}).get("models") or {}
    built, out = set(), []
    for e in entries:
        if (e["repo_id"], e["revision"]) in built:
            continue
        built.add((e["repo_id"], e["revision"]))
        snap = build_model_standin(e, models.get(name(e)), cache_dir, seed=seed)
        out.append({"repo_id": e["repo_id"], "revision": e["revision"], "kind": "model", "snapshot": str(snap)})
    return out


def standin_note(snapshot: str | os.PathLike) -> str | None:
    """The ``prh_standin`` note of a snapshot's config.json, or None for a real repo."""
    path = Path(snapshot) / "config.json"
    return json.loads(path.read_text()).get("prh_standin") if path.is_file() else None
