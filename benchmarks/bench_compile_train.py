"""What compiled training would save on a CPU (a decision the CPU-cost work left open), and that it moves the numbers.

Trains one offline-zoo GPT-2 for ``--steps`` steps twice from the same initialisation and batches: eager
(as ``prh train-language`` does) and ``torch.compile(model, dynamic=True)`` (inductor, C++ kernels), one
thread each, and prints CPU seconds per step after ``--warmup`` steps (the compile is in the warm-up; its
cost is printed apart) and how far the two runs' losses and weights drift apart. Not a test: a ratio to
read, recorded in benchmarks/README.md.

    python benchmarks/bench_compile_train.py <finished run's results/> --size l --steps 200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

SIZES = {"s": (2, 48, 2), "m": (3, 64, 4), "l": (4, 96, 4)}  # params.yaml zoo.language: layers, width, heads


def run(results: Path, *, size: str, steps: int, warmup: int, compiled: bool, seed: int = 0):
    from transformers import AutoTokenizer

    from prh.models.language_zoo import bucketed_batches, build_model, caption_texts, collate, lr_at

    tok = AutoTokenizer.from_pretrained(results / "models" / "_tokenizer" / "shapes_train")
    ids = [x[:512] for x in tok(caption_texts(results / "data" / "shapes_train", qa_pairs=3, seed=0))["input_ids"]]
    n_layer, n_embd, n_head = SIZES[size]
    torch.manual_seed(seed)
    model = build_model(arch="gpt2", vocab_size=len(tok), context=512, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                        pad_id=tok.pad_token_id, bos_id=tok.bos_token_id, eos_id=tok.eos_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    step_fn = torch.compile(model, dynamic=True) if compiled else model
    batches = bucketed_batches(np.array([len(x) for x in ids]), batch_size=16, rng=np.random.default_rng(seed))
    losses, start = [], None
    warm_cpu = time.process_time()
    for step in range(steps):
        if step == warmup:
            start = time.process_time()
            warm_cpu = start - warm_cpu
        input_ids, attention = collate([ids[i] for i in batches[step]], pad_id=tok.pad_token_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps=3000, lr=3e-3, warmup=20)
        loss = step_fn(input_ids=input_ids, labels=input_ids.masked_fill(attention == 0, -100), use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    per_step = (time.process_time() - start) / (steps - warmup)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return per_step, warm_cpu, np.array(losses), weights


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a finished default run's results/ (its shapes_train data and tokenizer)")
    p.add_argument("--size", choices=sorted(SIZES), default="l")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=40, help="steps before timing starts (the compile happens here)")
    args = p.parse_args()
    torch.set_num_threads(1)
    eager, eager_warm, l_e, w_e = run(args.results, size=args.size, steps=args.steps, warmup=args.warmup, compiled=False)
    comp, comp_warm, l_c, w_c = run(args.results, size=args.size, steps=args.steps, warmup=args.warmup, compiled=True)
    print(f"gpt2_{args.size}, {args.steps} steps, one thread, torch {torch.__version__}")
    print(f"eager:    {eager * 1e3:.1f} CPU-ms per step (warm-up {eager_warm:.1f} CPU-s)")
    print(f"compiled: {comp * 1e3:.1f} CPU-ms per step (warm-up incl. compile {comp_warm:.1f} CPU-s)")
    print(f"ratio eager / compiled: {eager / comp:.2f}x")
    print(f"loss, first step: {l_e[0]:.6f} vs {l_c[0]:.6f}; last: {l_e[-1]:.6f} vs {l_c[-1]:.6f}; "
          f"max |difference| over steps {np.abs(l_e - l_c).max():.2e}")
    print(f"weights after {args.steps} steps: max |difference| {float((w_e - w_c).abs().max()):.2e} "
          f"(bit-identical: {bool(torch.equal(w_e, w_c))})")


if __name__ == "__main__":
    main()
