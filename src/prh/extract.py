"""``prh extract-vision`` / ``prh extract-language``: a model over a dataset dir -> features file.

One job per (model, dataset), as the Snakemake rules in workflow/rules/features.smk
run it. Reads the dataset contract (``images.npy``, ``captions.jsonl``), loads the
model with ``prh.models.loaders`` (zoo directory or hub name), extracts with
``prh.features`` and writes ``<out>.safetensors`` + ``<out>.json`` via
``prh.io.save_features``. Finished batches are kept in ``<out>.partial/`` so a killed
job resumes where it stopped; the directory is removed after the final write.

    prh extract-vision --model results/models/vit_s --data results/data/shapes_eval \\
        --out results/features/shapes_eval/vit_s.safetensors --name vit_s
    prh extract-language --model bigscience/bloomz-560m --revision <sha> --data results/data/wit_1024 \\
        --out results/features/wit_1024/bloomz-560m.safetensors
    prh extract-language --model results/models/gpt2_s --data results/data/shapes_eval \
        --text-field samples --average-samples --out results/features/shapes_eval/gpt2_s.safetensors
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from prh.batching import budget_bytes, encode_texts, remove_checkpoint
from prh.config import schema_defaults
from prh.device import DTYPES, resolve_device, resolve_dtype, tf32_matmuls
from prh.evaluation.likelihood import bits_per_byte, bpb_from_nats, fused_bpb_tail
from prh.features import (
    LAYERS,
    PRH_PROMPT,
    check_layers,
    extract_language_features,
    extract_vision_features,
    pool_blocks,
    preprocess_images,
    resize_side,
)
from prh.errors import FeaturesError, UsageError
from prh.io import json_object, read_json, read_jsonl, save_features
from prh.metrics.sanity import check_features
from prh.models import loaders

# the `features` block's defaults (batch sizes, pooling, precision); their one home: features.schema.yaml
FEATURE_DEFAULTS = schema_defaults("features")


def _partial_dir(out) -> Path:
    return Path(str(out) + ".partial")


def _check_before_save(feats, out, meta: dict) -> None:
    """NaN or inf rows, or a model constant in every layer, are refused before anything is written;
    the finished batches go too, so the rerun extracts again instead of resuming the same numbers."""
    import torch

    try:
        check_features(torch.as_tensor(feats), where=f"{out} (model {meta['model']})", layer_dims=meta.get("layer_dims"))
    except FeaturesError:
        remove_checkpoint(_partial_dir(out))
        raise


def _read_images(data) -> np.ndarray:
    path = Path(data) / "images.npy"
    if not path.exists():
        raise UsageError(f"data={str(data)!r} has no images.npy; build the dataset first (snakemake {path})")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def _read_texts(data, text_field: str, text_index: int | None,
                average_samples: bool = False) -> tuple[list[str], list[int] | None]:
    """The texts to extract, flat, and with ``average_samples`` each item's number of texts."""
    path = Path(data) / "captions.jsonl"
    if not path.exists():
        raise UsageError(f"data={str(data)!r} has no captions.jsonl; build the dataset first (snakemake {path})")
    if average_samples and text_index is not None:
        raise ValueError("average_samples averages over every entry of the list; drop text_index (--text-index)")
    texts, counts = [], []
    for rec in read_jsonl(path):
        if text_field not in rec:
            raise ValueError(f"text_field={text_field!r} is not a key of {path}; keys: {sorted(rec)}")
        value = rec[text_field]
        if average_samples:
            if not isinstance(value, list):
                raise ValueError(f"average_samples needs a list field, but {path} field {text_field!r} is a "
                                 f"{type(value).__name__}; use e.g. text_field='samples' (--text-field samples)")
            if not value:
                raise ValueError(f"{path}: item {rec.get('id')!r} has no {text_field!r}: every item needs at "
                                 "least one caption to average; rebuild the dataset")
            texts += value
            counts.append(len(value))
            continue
        if isinstance(value, list):
            if text_index is None:
                raise ValueError(f"{path}: field {text_field!r} is a list; pass text_index (e.g. --text-index -1) "
                                 "for one entry, or average_samples (--average-samples) for their mean")
            value = value[text_index]
        texts.append(value)
    return texts, (counts if average_samples else None)


def _layer_dims(net, image, pre, dtype) -> list[int]:
    """Width of each block / stage before zero-padding (CNN stages differ), from one image."""
    import torch

    kw = {k: pre[k] for k in ("input_size", "mean", "std", "interpolation", "crop_pct")}
    x = preprocess_images(image, **kw).to(next(net.parameters()).device, dtype)
    with torch.inference_mode():
        return [int(t.shape[-1]) for t in pool_blocks(net, x, pre["pooling"])]


def _check_resolution(data, images, pre) -> dict:
    """Stored side vs the side the model's transform resizes to (``resize_side``); warns when the
    model gets an upsample of images whose originals had more pixels (set the dataset's image_size)."""
    stored = int(images.shape[1])
    need = resize_side(int(pre["input_size"][-1]), float(pre["crop_pct"]))
    meta_path = Path(data) / "meta.json"
    source = read_json(meta_path).get("source_max_side") if meta_path.exists() else None
    upsampled = stored < need and source is not None and source > stored
    if upsampled:
        warnings.warn(
            f"{data}: images are stored at {stored} px but the model resizes to {need} px and the originals "
            f"had up to {source} px: it sees an upsample of pixels thrown away. Set this dataset's image_size "
            f"to at least {need} in params.yaml and rebuild it (the reference feeds the original image)",
            UserWarning, stacklevel=2,
        )
    return {"stored_image_size": stored, "resize_size": need, "upsampled": bool(upsampled)}


def extract_vision_dataset(*, model, data, out, name=None, revision=None,
                           batch_size=FEATURE_DEFAULTS["vision_batch_size"], device="auto", dtype=None, progress=True,
                           layers="all", gpu_memory_budget_gb=None, checkpoint=None) -> None:
    """Features of ``model`` (zoo dir or timm name) on ``data/images.npy``, saved to ``out``.

    ``dtype`` None: the schema default of ``features.vision_dtype`` (float32, as the reference
    runs its vision models); "auto" is bfloat16 on CUDA, float32 on the CPU.
    ``layers="last"``: only the last block / stage is kept (N x 1 x D; the meta's ``layer_indices``
    says which block of the model it is): for datasets whose only reader is a linear probe.
    ``gpu_memory_budget_gb`` (GB or "auto"): on CUDA the batch is sized from it (``extract_vision_features``).
    ``checkpoint``: a model on no hub (``prh.models.checkpoints``: a plain-URL checkpoint or a seeded random one).
    """
    check_layers(layers)
    dev = resolve_device(device)
    dtype = FEATURE_DEFAULTS["vision_dtype"] if dtype is None else dtype
    dt = resolve_dtype("float32" if dtype == "tf32" else dtype, dev)
    images = _read_images(data)
    net, pre = loaders.load_vision_model(model, revision=revision, checkpoint=checkpoint)
    resolution = _check_resolution(data, images, pre)
    kw = {k: pre[k] for k in ("pooling", "mean", "std", "input_size", "interpolation", "crop_pct")}
    with tf32_matmuls(dtype == "tf32", dev) as tf32:
        feats = extract_vision_features(net, images, batch_size=batch_size, device=dev, dtype=dt,
                                        checkpoint_dir=_partial_dir(out),
                                        progress=progress, layers=layers, memory_budget_gb=gpu_memory_budget_gb, **kw)
    layer_dims = _layer_dims(net, images[:1], pre, dt)
    indices = list(range(len(layer_dims)))[-feats.shape[1]:]
    meta = {
        "model": name or Path(str(model)).name, "source": str(model), "revision": revision,
        **({"checkpoint": {**checkpoint, "sha256": pre.get("sha256")}} if checkpoint else {}),
        "dataset": Path(data).name, "modality": "vision", "dtype": str(dt).removeprefix("torch."),
        "matmul_precision": "tf32" if tf32 else "ieee",  # features.vision_dtype tf32: TF32 products on CUDA only
        "n_params": loaders.count_params(net), "n_layers": int(feats.shape[1]),
        "layer_dims": [layer_dims[i] for i in indices], "layers": layers, "layer_indices": indices, **kw,
        **resolution,
    }
    _check_before_save(feats, out, meta)
    save_features(out, feats, meta)
    remove_checkpoint(_partial_dir(out))
    del net
    loaders.free_model_memory()


def extract_language_dataset(*, model, data, out, name=None, revision=None,
                             pooling=FEATURE_DEFAULTS["language_pooling"], prompt_template=None, text_field="text",
                             text_index=None, average_samples=False, batch_size=FEATURE_DEFAULTS["language_batch_size"],
                             device="auto", dtype="auto", device_map=None, load_in_4bit=False, bpb=True,
                             max_batch_tokens=None, progress=True, layers="all", gpu_memory_budget_gb=None) -> None:
    """Features (and bits-per-byte for causal LMs) of ``model`` on ``data/captions.jsonl``, saved to ``out``.

    The text of item i is ``captions.jsonl``'s ``text_field`` (entry ``text_index`` when it is a
    list). With ``average_samples`` the field is a list of K_i captions of item i (e.g. the shapes
    world's ``samples``) and item i gets their mean: features ``F_l(i) = (1 / K_i) sum_k f_l(t_ik)``
    (each caption pooled alone), bits per byte ``sum_k bits(t_ik) / sum_k bytes(t_ik)``; all
    sum_i K_i captions run in one length-grouped, resumable pass (``samples_per_item`` of
    ``extract_language_features`` and ``bits_per_byte``).

    Several entries of a list field in one job (caption densities, Fig 9): ``text_index`` a list
    of J indices and ``out`` a list of J paths; the model is loaded once and entry ``text_index[j]``
    is written to ``out[j]``, each file exactly what a job with that one index writes.

    Hidden states are streamed to the CPU layer by layer; ``gpu_memory_budget_gb`` (GB, "auto"
    or None) caps a batch's estimated activations (``extract_language_features``). ``layers="last"``
    keeps only the final hidden state (N x 1 x D, ``layer_indices`` in the meta).
    """
    check_layers(layers)
    indices, outs = _jobs(text_index, out)
    if prompt_template == "prh":
        prompt_template = PRH_PROMPT
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    inputs = [_read_texts(data, text_field, index, average_samples) for index in indices]
    net, tok = loaders.load_language_model(model, revision=revision, dtype=dt, device_map=device_map,
                                       load_in_4bit=load_in_4bit)
    n_hidden = net.config.get_text_config().num_hidden_layers + 1
    causal = loaders.is_causal_lm(net.config)
    for index, path, (texts, counts) in zip(indices, outs, inputs):
        common = dict(batch_size=batch_size, device=dev, dtype=dt, max_batch_tokens=max_batch_tokens,
                      checkpoint_dir=_partial_dir(path), progress=progress, samples_per_item=counts)
        # bits per byte from the feature pass itself where the texts are the same and the tokens a prefix-extension
        # (fused_bpb_tail checks it); not under a GPU memory budget, which sizes batches without the logits
        tail = None
        if bpb and causal and prompt_template is None and budget_bytes(gpu_memory_budget_gb, dev) is None:
            tail = fused_bpb_tail(net, tok, texts, encode_texts(tok, texts), device=dev, dtype=dt)
        feats = extract_language_features(net, tok, texts, pooling=pooling, prompt_template=prompt_template,
                                          layers=layers, gpu_memory_budget_gb=gpu_memory_budget_gb,
                                          score_tail=tail, **common)
        if tail is not None:
            feats, nats = feats
        meta = {
            "model": name or Path(str(model)).name, "source": str(model), "revision": revision,
            "dataset": Path(data).name, "modality": "language", "pooling": pooling,
            "prompt_template": prompt_template, "text_field": text_field, "text_index": index,
            "average_samples": bool(average_samples),
            "samples_per_item": {"min": min(counts), "max": max(counts), "total": len(texts)} if counts else None,
            "dtype": str(dt).removeprefix("torch."), "n_params": loaders.count_params(net),
            "n_layers": int(feats.shape[1]), "causal_lm": causal,
            "load_in_4bit": load_in_4bit, "layers": layers, "layer_indices": list(range(n_hidden))[-feats.shape[1]:],
            "gpu_memory_budget_gb": gpu_memory_budget_gb,
        }
        if bpb and causal:
            per_item = (bits_per_byte(net, tok, texts, **common) if tail is None
                        else bpb_from_nats(nats, texts, counts))
            meta.update(bpb=float(per_item.mean()), bpb_per_item=per_item.tolist())
        _check_before_save(feats, path, meta)
        save_features(path, feats, meta)
        remove_checkpoint(_partial_dir(path))
    del net
    loaders.free_model_memory()


def _jobs(text_index, out) -> tuple[list, list]:
    """(indices, out paths) of equal length: one (index, path) for a single job, J of each for a list."""
    if not isinstance(text_index, (list, tuple)):
        if isinstance(out, (list, tuple)):
            raise ValueError(f"out is a list of {len(out)} paths but text_index={text_index!r} is not a list: "
                             "pass one text index per output (--text-index 0 1 ... with --out a b ...)")
        return [text_index], [out]
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if not text_index or len(outs) != len(text_index):
        raise ValueError(f"text_index has {len(text_index)} entries and out {len(outs)} paths: "
                         "pass one output path per text index, in the same order")
    if len(set(map(str, outs))) != len(outs):
        raise ValueError(f"out names a path twice ({[str(o) for o in outs]}): each text index needs its own file")
    return list(text_index), outs


def _common_args(parser: argparse.ArgumentParser, *, several_outs: bool = False) -> None:
    parser.add_argument("--model", required=True, help="zoo checkpoint dir or hub name")
    parser.add_argument("--revision", default=None, help="hub revision (commit hash); ignored for a dir")
    parser.add_argument("--data", required=True, help="dataset dir, e.g. results/data/shapes_eval")
    parser.add_argument("--out", required=True, nargs="+" if several_outs else None,
                        help="results/features/<dataset>/<model>.safetensors"
                             + ("; one per --text-index when several are given" if several_outs else ""))
    parser.add_argument("--name", default=None, help="model name recorded in the meta (default: dir name)")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--layers", default="all", choices=list(LAYERS),
                        help="all: every block | last: the last one only (a linear probe's only input)")


def vision_main(argv: list[str] | None = None) -> None:
    from prh.config import EXTRACT_CONFIG
    from prh.slices import add_slice

    parser = argparse.ArgumentParser(prog="prh extract-vision", description="per-block pooled vision features")
    _common_args(parser)
    parser.add_argument("--checkpoint", type=json_object, default=None,
                        help="JSON of a model on no hub (prh.models.checkpoints.resolve_checkpoint: a plain-URL "
                             "checkpoint, SHA-256 pinned, or a seeded random one); --model is then its label")
    # batch size, dtype (tf32: float32 weights, TF32 products on CUDA) and, on CUDA, the activations' memory budget
    settings = add_slice(parser, EXTRACT_CONFIG["vision"])
    a = parser.parse_args(argv)
    c = settings(a)["features"]
    extract_vision_dataset(model=a.model, data=a.data, out=a.out, name=a.name, revision=a.revision,
                           batch_size=c["vision_batch_size"], device=a.device, dtype=c["vision_dtype"],
                           progress=not a.no_progress, layers=a.layers, gpu_memory_budget_gb=c["gpu_memory_budget_gb"],
                           checkpoint=a.checkpoint)


def language_main(argv: list[str] | None = None) -> None:
    from prh.config import EXTRACT_CONFIG
    from prh.slices import add_slice

    parser = argparse.ArgumentParser(prog="prh extract-language", description="per-layer pooled language features")
    _common_args(parser, several_outs=True)
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES], help="the model's weights (auto: its own)")
    parser.add_argument("--text-field", default="text", help="captions.jsonl key holding the text")
    parser.add_argument("--text-index", type=int, nargs="+", default=None,
                        help="index into the field when it is a list; several (with as many --out paths): "
                             "the model is loaded once and each index written to its own file (Fig 9's levels)")
    parser.add_argument("--average-samples", action="store_true",
                        help="the field is a list of captions per item (e.g. samples): features and bits per "
                             "byte are their mean over each item's captions")
    parser.add_argument("--device-map", default=None, help="'auto' to spread a large model over devices")
    parser.add_argument("--load-in-4bit", action="store_true", help="4-bit weights (bitsandbytes)")
    parser.add_argument("--no-bpb", action="store_true", help="skip bits-per-byte for causal LMs")
    # batch size, pooling, prompt template, and the caps of a batch (tokens; on CUDA, the activations' memory)
    settings = add_slice(parser, EXTRACT_CONFIG["language"])
    a = parser.parse_args(argv)
    c = settings(a)["features"]
    one = a.text_index is None or len(a.text_index) == 1  # one index (or none): one output, as before
    extract_language_dataset(model=a.model, data=a.data, out=a.out[0] if one and len(a.out) == 1 else a.out,
                             name=a.name, revision=a.revision,
                             pooling=c["language_pooling"], prompt_template=c["prompt_template"],
                             text_field=a.text_field,
                             text_index=a.text_index[0] if one and a.text_index else a.text_index, average_samples=a.average_samples, batch_size=c["language_batch_size"], device=a.device, dtype=a.dtype,
                             device_map=a.device_map, load_in_4bit=a.load_in_4bit, bpb=not a.no_bpb,
                             max_batch_tokens=c["max_batch_tokens"], progress=not a.no_progress, layers=a.layers,
                             gpu_memory_budget_gb=c["gpu_memory_budget_gb"])
