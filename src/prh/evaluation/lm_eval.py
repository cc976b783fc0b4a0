"""Did the language zoo learn? Held-out bits-per-byte of each causal LM against a unigram baseline.

Issue 4 ("the models learn") and PRH Figure 3's competence axis. For each held-out
caption t (every density level of the evaluation set):

    bpb(t) = sum_j -log2 p(x_j | x_<j) / len(t.encode("utf-8"))

computed by ``prh.evaluation.likelihood.bits_per_byte`` (one BOS of context, every caption token
scored, end-of-text not scored). The baseline is a **byte-unigram** model fit on the
training captions (all densities) with add-one smoothing over the 256 byte values,

    p(b) = (c_b + 1) / (C + 256),    bpb_uni(t) = sum_{b in t} -log2 p(b) / len(t),

i.e. a character model with no context, in the same unit and over the same bytes as the
LM (a byte model does not depend on the zoo's tokenizer, so it is one fixed number for
every model). Reported numbers are means over captions, overall and per density level.

    prh eval-lm --data results/data/shapes_eval --train-data results/data/shapes_train \\
        --names gpt2_s_100 gpt2_s_400 --models results/models/gpt2_s_100 results/models/gpt2_s_400 \\
        --out results/experiments/zoo/language.json
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np

from prh.io import read_json, write_json


def unigram_bits_per_byte(*, train_texts: list[str], texts: list[str]) -> np.ndarray:
    """Bits-per-byte of each of ``texts`` under a byte-unigram model fit on ``train_texts``.

    Parameters
    ----------
    train_texts : captions the byte frequencies are counted on.
    texts : non-empty captions to score.

    Returns
    -------
    float64 array, one value per text: ``sum_b -log2((c_b + 1) / (C + 256)) / n_bytes``.
    """
    if not train_texts:
        raise ValueError("train_texts is empty: pass the training captions")
    counts = np.zeros(256, dtype=np.float64)
    for t in train_texts:
        counts += np.bincount(np.frombuffer(t.encode("utf-8"), dtype=np.uint8), minlength=256)
    bits = -np.log2((counts + 1.0) / (counts.sum() + 256.0))
    out = np.empty(len(texts))
    for i, t in enumerate(texts):
        b = np.frombuffer(t.encode("utf-8"), dtype=np.uint8)
        if b.size == 0:
            raise ValueError(f"texts[{i}] is empty: bits-per-byte needs at least one byte")
        out[i] = bits[b].sum() / b.size
    return out


def _level_texts(data: str | os.PathLike, max_items: int | None) -> tuple[list[str], np.ndarray]:
    """Every caption of the first ``max_items`` items, flattened, with its density level."""
    from prh.data.shapes import load_dataset

    items = load_dataset(data).texts[:max_items]
    texts = [t for item in items for t in item]
    levels = np.array([level for item in items for level in range(len(item))])
    return texts, levels


def _summary(bpb: np.ndarray, levels: np.ndarray) -> dict:
    return {"bpb": float(bpb.mean()),
            "bpb_per_level": [float(bpb[levels == k].mean()) for k in range(int(levels.max()) + 1)]}


def evaluate_language_zoo(*, data: str, train_data: str, names: list[str], models: list[str],
                          max_items: int | None = None, batch_size: int = 32, threads: int = 1) -> dict:
    """Held-out bits-per-byte of each causal LM in ``models`` and of the byte-unigram baseline.

    Parameters
    ----------
    data : shapes dataset directory whose captions (all densities) are scored.
    train_data : shapes dataset directory the zoo was trained on (fits the unigram baseline).
    names, models : model names and their checkpoint directories, in the same order.
    max_items : score only the first ``max_items`` items (None: all).
    batch_size, threads : captions per forward pass, torch CPU threads.

    Returns
    -------
    dict with ``unigram`` and per-model ``bpb`` (mean over captions), ``bpb_per_level``
    (sparsest caption first), ``below_unigram`` (baseline minus model), and the model's
    training steps and parameter count.
    """
    import torch

    from prh.evaluation.likelihood import bits_per_byte
    from prh.models.language_zoo import TRAINING_INFO, caption_texts
    from prh.models.loaders import count_params, is_causal_lm, load_language_model

    if len(names) != len(models):
        raise ValueError(f"names ({len(names)}) and models ({len(models)}) must pair up one to one")
    torch.set_num_threads(threads)
    texts, levels = _level_texts(data, max_items)
    unigram = _summary(unigram_bits_per_byte(train_texts=caption_texts(train_data), texts=texts), levels)
    result = {
        "unit": "bits per UTF-8 byte, mean over held-out captions",
        "data": str(data), "n_texts": len(texts), "n_levels": int(levels.max()) + 1,
        "unigram": {"model": "byte unigram, add-one smoothing, fit on the training captions", **unigram},
        "models": {},
    }
    for name, model_dir in zip(names, models):
        model, tokenizer = load_language_model(model_dir)
        if not is_causal_lm(model.config):
            raise ValueError(f"models: {model_dir} ({name}) is not a causal LM; bits-per-byte needs one")
        summary = _summary(bits_per_byte(model, tokenizer, texts, batch_size=batch_size), levels)
        info_path = Path(model_dir) / TRAINING_INFO
        info = read_json(info_path) if info_path.exists() else {}
        result["models"][name] = {
            **summary, "below_unigram": unigram["bpb"] - summary["bpb"],
            "steps": info.get("steps"), "n_params": count_params(model),
        }
        print(f"{name}: {summary['bpb']:.4f} bits/byte (unigram {unigram['bpb']:.4f})")
    return result


def run_lm_eval(*, out: str, **kwargs) -> dict:
    """``evaluate_language_zoo(**kwargs)`` written to ``out`` as JSON."""
    result = evaluate_language_zoo(**kwargs)
    if any(not math.isfinite(m["bpb"]) for m in result["models"].values()):
        raise ValueError(f"a model's bits-per-byte is not finite: {result['models']}")
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh eval-lm", description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="held-out shapes dataset directory")
    parser.add_argument("--train-data", required=True, help="training shapes dataset (unigram baseline)")
    parser.add_argument("--names", nargs="+", required=True, help="model names")
    parser.add_argument("--models", nargs="+", required=True, help="checkpoint directories, same order")
    parser.add_argument("--out", required=True, help="output JSON")
    parser.add_argument("--max-items", type=int, default=None, help="score only the first N items")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    run_lm_eval(out=args.out, data=args.data, train_data=args.train_data, names=args.names, models=args.models,
                max_items=args.max_items, batch_size=args.batch_size, threads=args.threads)
