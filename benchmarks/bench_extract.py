"""Length-grouped batching vs pad-to-longest for language feature extraction.

A tiny random causal LM (GPT-2 layout) on the CPU extracts mean-pooled features of
every layer for captions whose lengths are long-tailed like WIT's (log-normal word
counts: median ~15 words, a tail past 150). Each mode runs in its own subprocess, so
peak memory (max RSS minus the RSS after loading the model) is measured cleanly.

    OMP_NUM_THREADS=1 python benchmarks/bench_extract.py [--n 512] [--batch-size 32]

Modes: ``padded`` (input order, every batch padded to the longest caption of the set),
``grouped`` (sorted by length, batches of the same item count), ``budget`` (sorted, each
batch capped at ``--max-tokens`` padded tokens). Prints per mode: real tokens/s, padded
tokens processed, the largest batch (items x length, which sets the activation memory),
peak extra RSS; then the ratios to ``padded``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def make_captions(n: int, seed: int = 0) -> list[str]:
    """Captions with log-normal word counts (median 15, long tail), capped at 200 words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(400)] + ["the", "a", "of", "in", "and", "image", "photo", "red", "city"]
    counts = np.clip(np.round(rng.lognormal(mean=np.log(15), sigma=0.8, size=n)), 1, 200).astype(int)
    return [" ".join(rng.choice(words, size=c)) for c in counts]


def build(captions):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(captions, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<s>"],
                                                                show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>", pad_token="<pad>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=128, n_layer=4, n_head=4,
                                       n_positions=256)).eval()
    return model, tokenizer


def _current_rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def run_mode(mode: str, n: int, batch_size: int, max_tokens: int) -> dict:
    import torch

    from prh.batching import length_batches
    from prh.features import extract_language_features

    torch.set_num_threads(1)
    captions = make_captions(n)
    model, tok = build(captions)
    lengths = [len(ids) for ids in tok(captions).input_ids]
    grouped = mode != "padded"
    # budget: many short captions per batch, few long ones; at most max_tokens padded tokens each
    bs, budget = (8 * batch_size, max_tokens) if mode == "budget" else (batch_size, None)
    batches = length_batches(lengths, bs, group_by_length=grouped, max_tokens=budget)
    shapes = [(len(b), max(lengths[i] for i in b) if grouped else max(lengths)) for b in batches]
    extract_language_features(model, tok, ["a b", "c"], progress=False)  # warm-up, small: keeps max RSS low
    rss0 = _current_rss_kb()
    t0 = time.perf_counter()
    feats = extract_language_features(model, tok, captions, batch_size=bs, group_by_length=grouped,
                                      max_batch_tokens=budget, progress=False)
    seconds = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "seconds": seconds, "real_tokens": sum(lengths),
            "padded_tokens": sum(b * t for b, t in shapes), "largest_batch": max(b * t for b, t in shapes),
            "n_batches": len(shapes),
            "tokens_per_s": sum(lengths) / seconds, "peak_extra_rss_mb": (rss1 - rss0) / 1024,
            "max_len": max(lengths), "median_len": float(np.median(lengths)),
            "checksum": float(feats.double().abs().sum())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=1024, help="token budget per batch of the 'budget' mode")
    p.add_argument("--mode", choices=["padded", "grouped", "budget"], help=argparse.SUPPRESS)  # subprocess entry
    a = p.parse_args()
    if a.mode:
        print(json.dumps(run_mode(a.mode, a.n, a.batch_size, a.max_tokens)))
        return
    res = {}
    for mode in ("padded", "grouped", "budget"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--n", str(a.n), "--batch-size",
                              str(a.batch_size), "--max-tokens", str(a.max_tokens)],
                             check=True, capture_output=True, text=True)
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    g, pd, bu = res["grouped"], res["padded"], res["budget"]
    print(f"{a.n} captions, batch {a.batch_size}, tokens: median {g['median_len']:.0f}, max {g['max_len']}, "
          f"total {g['real_tokens']}; budget mode: <= {a.max_tokens} tokens and <= {8 * a.batch_size} items")
    for r in (pd, g, bu):
        print(f"  {r['mode']:8s} {r['tokens_per_s']:8.0f} real tokens/s {r['seconds']:6.2f} s  {r['n_batches']:3d} batches"
              f"  padded tokens {r['padded_tokens']:6d}  largest batch {r['largest_batch']:5d} tokens"
              f"  peak extra RSS {r['peak_extra_rss_mb']:6.1f} MB")
    for r in (g, bu):
        print(f"{r['mode']} / padded: tokens/s {r['tokens_per_s'] / pd['tokens_per_s']:.2f}x, "
              f"padded tokens {r['padded_tokens'] / pd['padded_tokens']:.2f}x, "
              f"largest batch {r['largest_batch'] / pd['largest_batch']:.2f}x, "
              f"peak extra RSS {r['peak_extra_rss_mb'] / max(pd['peak_extra_rss_mb'], 1e-9):.2f}x")
    same = all(abs(r["checksum"] - pd["checksum"]) <= 1e-6 * abs(pd["checksum"]) for r in (g, bu))
    print(f"same features in every mode (checksum): {same}")


if __name__ == "__main__":
    main()
