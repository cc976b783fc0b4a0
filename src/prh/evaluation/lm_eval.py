"""Did the language zoo learn? Held-out bits per byte of each causal LM, between a unigram and the floor.

The zoo's brief ("show the models are competent before reading their alignment") and
PRH Figure 3's competence axis. The text scored is what alignment reads: the densest
caption of each held-out item. For a caption t,

    bpb(t) = sum_j -log2 p(x_j | x_<j) / len(t.encode("utf-8"))

computed by ``prh.evaluation.likelihood.bits_per_byte`` (one BOS of context, every caption
token scored, end-of-text not scored). Two references bracket it, in the same unit over
the same bytes:

- **unigram**: a word-unigram model fit on the training captions of the same density
  (the zoo tokenizer's tokens, add-one smoothing over its vocabulary), no context;
- **floor**: the generator's own -log2 p(t), computed exactly from the world
  (``prh.data.world_prob.entropy_floor_bpb``): no model can do better on average.

    reducible_fraction = (bpb_unigram - bpb_model) / (bpb_unigram - bpb_floor)

is the share of the learnable bits a model captured: 0 for a unigram, 1 at the floor.
Reported numbers are totals over captions (sum of bits / sum of bytes).

    prh eval-lm --data results/data/shapes_eval --train-data results/data/shapes_train \\
        --names gpt2_s_r0_100 --models results/models/gpt2_s_r0_100 \\
        --out results/experiments/zoo/language.json
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np

from prh.io import read_json, write_json
from prh.errors import UsageError
from prh.slices import add_slice, block_keys

# the params.yaml keys `prh eval-lm` reads: the world block, whose generator sets the entropy floor (prh.slices)
CONFIG = {"world": block_keys("world")}


def unigram_bits(*, tokenizer, train_texts: list[str], texts: list[str]) -> np.ndarray:
    """Bits of each of ``texts`` under a token-unigram model fit on ``train_texts``.

    ``p(w) = (c_w + 1) / (C + V)`` over the tokenizer's V tokens (add-one smoothing);
    the tokens scored are those of the text without special tokens, as for the LMs.
    """
    if not train_texts:
        raise ValueError("train_texts is empty: pass the training captions")
    vocab = len(tokenizer)
    counts = np.zeros(vocab, dtype=np.float64)
    for ids in tokenizer(train_texts, add_special_tokens=False)["input_ids"]:
        counts += np.bincount(ids, minlength=vocab)
    bits = -np.log2((counts + 1.0) / (counts.sum() + vocab))
    return np.array([bits[ids].sum() for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]])


def _densest(data: str | os.PathLike, max_items: int | None) -> tuple[list[str], list[dict]]:
    """The densest caption and the scene of each of the first ``max_items`` items."""
    from prh.data.shapes import load_dataset

    ds = load_dataset(data)
    return [t[-1] for t in ds.texts[:max_items]], ds.scenes[:max_items]


def evaluate_language_zoo(*, data: str, train_data: str, names: list[str], models: list[str], world: dict | None = None,
                          max_items: int | None = None, batch_size: int = 32, threads: int = 1) -> dict:
    """Held-out bits per byte of each causal LM in ``models``, the unigram and the floor.

    Parameters
    ----------
    data : shapes dataset directory whose densest captions are scored.
    train_data : shapes dataset directory the zoo was trained on (fits the unigram).
    names, models : model names and their checkpoint directories, in the same order.
    world : the params.yaml world block the datasets were made with (the floor's generator).
    max_items : score only the first ``max_items`` items (None: all).
    batch_size, threads : captions per forward pass, torch CPU threads.

    Returns
    -------
    dict with ``unigram`` and ``floor`` (bpb) and per model ``bpb``, ``reducible_fraction``,
    ``below_unigram``, training ``steps``, ``seed``, ``run`` and parameter count.
    """

    from prh.data.world_prob import entropy_floor_bpb
    from prh.evaluation.likelihood import bits_per_byte
    from prh.models.language_zoo import TRAINING_INFO
    from prh.models.loaders import count_params, is_causal_lm, load_language_model

    if len(names) != len(models) or not names:
        raise UsageError(f"names ({len(names)}) and models ({len(models)}) must pair up one to one, at least one")
    from prh.device import set_threads

    set_threads(threads)
    texts, _ = _densest(data, max_items)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    floor = float(entropy_floor_bpb(texts, world=world))
    _, tokenizer = load_language_model(models[0])
    train_texts, _ = _densest(train_data, None)
    unigram = float(unigram_bits(tokenizer=tokenizer, train_texts=train_texts, texts=texts).sum() / nbytes)
    result = {
        "unit": "bits per UTF-8 byte of the densest held-out captions (sum of bits / sum of bytes)",
        "data": str(data), "n_texts": len(texts), "n_bytes": nbytes,
        "unigram": {"model": "word unigram, add-one smoothing, fit on the training captions", "bpb": unigram},
        "floor": {"model": "the generator's exact -log2 p(caption) (prh.data.world_prob)", "bpb": floor},
        "models": {},
    }
    for name, model_dir in zip(names, models):
        model, tok = load_language_model(model_dir)
        if not is_causal_lm(model.config):
            raise ValueError(f"models: {model_dir} ({name}) is not a causal LM; bits per byte needs one")
        per_text = bits_per_byte(model, tok, texts, batch_size=batch_size, progress=False)
        bpb = float(sum(b * len(t.encode("utf-8")) for b, t in zip(per_text, texts)) / nbytes)
        info_path = Path(model_dir) / TRAINING_INFO
        info = read_json(info_path) if info_path.exists() else {}
        result["models"][name] = {
            "bpb": bpb, "reducible_fraction": (unigram - bpb) / (unigram - floor), "below_unigram": unigram - bpb,
            "steps": info.get("steps"), "seed": info.get("seed"), "n_params": count_params(model),
        }
        print(f"{name}: {bpb:.4f} bits/byte (unigram {unigram:.4f}, floor {floor:.4f}), "
              f"reducible fraction {result['models'][name]['reducible_fraction']:.3f}", flush=True)
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
    settings = add_slice(parser, CONFIG)
    args = parser.parse_args(argv)
    run_lm_eval(out=args.out, data=args.data, train_data=args.train_data, world=settings(args)["world"],
                names=args.names, models=args.models,
                max_items=args.max_items, batch_size=args.batch_size, threads=args.threads)
