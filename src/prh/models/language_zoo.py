"""The offline language zoo: a tokenizer and small GPT-2 / BERT models trained on shapes-world text.

PRH section 4 pictures language models as learners that converge on the statistics of the
world behind their text; this project asks for a zoo of graded competence (sizes x seeds x
training budgets). Every model is a plain Hugging Face ``save_pretrained`` directory (weights,
config, fast tokenizer) loadable with ``AutoModel`` / ``AutoTokenizer``, so the feature
extractor treats zoo and hub checkpoints alike.

- Training text: every caption density of each scene, each followed by a few question-answer
  pairs about the scene (``prh.data.qa``; ``--relational``: the relational mix of ones),
  so later tokens depend on earlier content and a model is rewarded for reading its context.
- Tokenizer: word-level over the grammar's closed vocabulary (``grammar_text``): one
  token per word, a percent is one token. Special tokens follow RoBERTa: ``<s>`` is BOS
  and CLS, ``</s>`` is EOS and SEP, so one tokenizer (``<s> text </s>``) serves the causal
  and the masked models.
- Causal LM (``GPT2LMHeadModel``): next-token cross-entropy, L = -1/T sum_t log p(x_t | x_<t).
- Masked LM (``BertForMaskedLM``): BERT's recipe (15% of text tokens: 80% ``<mask>``, 10% random, 10% kept).
- Training: AdamW, linear warm-up then cosine decay to 10% of the peak rate over the run's
  budget, gradient clipping at 1, length-bucketed batches (less padding), everything seeded:
  the same arguments give the same weights on CPU. A run may save checkpoints at several
  steps (each a model of the zoo, ``<run>_<steps>``).

    prh train-tokenizer --data results/data/shapes_train --out results/models/_tokenizer/shapes_train
    prh train-language --data results/data/shapes_train --tokenizer results/models/_tokenizer/shapes_train \\
        --arch gpt2 --n-layer 2 --n-embd 48 --n-head 2 --steps 1000 --checkpoints 0 30 100 300 1000 \\
        --qa-pairs 3 --out 'results/models/gpt2_s_r0_{steps}'
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from prh.io import atomic_dir, write_json
from prh.errors import UsageError

ARCHS = ("gpt2", "bert")
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
TRAINING_INFO = "training.json"


def caption_texts(data_dir: str | os.PathLike, *, qa_pairs: int = 0, seed: int = 0, relational: float = 0.0) -> list[str]:
    """Every caption of a shapes dataset, all densities, item by item (sparsest first).

    ``qa_pairs`` > 0 appends that many question-answer pairs about the scene to each
    caption (``prh.data.qa``, drawn from ``default_rng([seed, item, level])``): the
    language zoo's training text, in which later tokens depend on earlier content.
    ``relational`` > 0: the relational mix (``prh.data.relational.training_qa_text``).
    """
    from prh.data.relational import training_qa_text
    from prh.data.shapes import load_dataset

    data = load_dataset(data_dir)
    if qa_pairs <= 0 and not relational:
        return [text for item in data.texts for text in item]
    return [f"{text} {training_qa_text(scene, key=[seed, i, level], n_pairs=qa_pairs, fraction=relational)}"
            for i, (item, scene) in enumerate(zip(data.texts, data.scenes)) for level, text in enumerate(item)]


def train_tokenizer(*, texts: list[str]):
    """A word-level tokenizer over the closed vocabulary of ``texts``, as a ``PreTrainedTokenizerFast``.

    Words are runs of letters/digits or of punctuation (``tokenizers``' Whitespace pre-tokenizer): "centred at
    (34, 56)." -> centred, at, (, 34, ",", 56, ")." Every word is one token (34 too), so a model spends no capacity
    spelling; the grammar is closed, so held-out captions have no unknown words (``<unk>`` is for anything else).
    Spaces are not tokens: the grammar fixes them, so bits per byte still counts every byte of the text.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise ValueError("texts is empty: pass the training captions")
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=SPECIALS, show_progress=False))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        mask_token="<mask>", cls_token="<s>", sep_token="</s>",
        # no token_type_ids: GPT-2 would otherwise add token embeddings of id 0 at extraction
        model_input_names=["input_ids", "attention_mask"],
    )


def build_model(*, arch: str, vocab_size: int, context: int, n_layer: int, n_embd: int, n_head: int,
                pad_id: int, bos_id: int, eos_id: int):
    """A randomly initialised ``GPT2LMHeadModel`` or ``BertForMaskedLM`` (dropout off: tiny models, ample data).

    GPT-2's GELU is ``gelu_pytorch_tanh``: the same tanh approximation as GPT-2's
    ``gelu_new`` (equal to float rounding) in one fused kernel, where ``gelu_new`` is six
    elementwise ops; it was a quarter of a training step's CPU time (benchmarks/README.md).
    """
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not trainable here; choose one of {ARCHS}")
    if n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
    if arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size, n_positions=context, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_pytorch_tanh",
            bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
        )
        return GPT2LMHeadModel(config)
    config = BertConfig(
        vocab_size=vocab_size, hidden_size=n_embd, num_hidden_layers=n_layer, num_attention_heads=n_head,
        intermediate_size=4 * n_embd, max_position_embeddings=context, type_vocab_size=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id,
    )
    return BertForMaskedLM(config)


def bucketed_batches(lengths: np.ndarray, *, batch_size: int, rng: np.random.Generator,
                     window: int = 128) -> list[np.ndarray]:
    """One epoch of index batches: shuffle, sort within windows of ``window`` batches by length, shuffle batches.

    Captions of similar length share a batch: on the default world's training text padding is 0.8% of tokens
    with windows of 128 batches (6.3% with 16), and a step of gpt2_s takes 15% less CPU (benchmarks/README.md).
    """
    if window < 1 or batch_size < 1:
        raise ValueError(f"window={window} and batch_size={batch_size} must be >= 1 (batches per sorted window, items per batch)")
    order = rng.permutation(len(lengths))
    span = window * batch_size
    batches = []
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(ids: list[list[int]], *, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into ``input_ids`` and ``attention_mask`` (B x T)."""
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = torch.tensor(x)
    return input_ids, (input_ids != pad_id).long()


def mask_tokens(input_ids: torch.Tensor, *, special: torch.Tensor, mask_id: int, vocab_size: int,
                generator: torch.Generator, prob: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of ``prob`` of the non-special tokens (80% -> mask, 10% random, 10% kept): (ids, labels or -100)."""
    draw = torch.rand(input_ids.shape, generator=generator)
    chosen = (draw < prob) & ~special
    labels = input_ids.masked_fill(~chosen, -100)
    how = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    corrupted = input_ids.clone()
    corrupted[chosen & (how < 0.8)] = mask_id
    swap = chosen & (how >= 0.8) & (how < 0.9)
    corrupted[swap] = random_ids[swap]
    return corrupted, labels


def lr_at(step: int, *, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to 0.1 * lr at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_language_model(*, texts: list[str], tokenizer, arch: str, n_layer: int, n_embd: int, n_head: int,
                         steps: int, context: int = 512, batch_size: int = 16, lr: float = 3e-3, warmup: int = 20,
                         weight_decay: float = 0.01, seed: int = 0, log_every: int = 10,
                         checkpoints: list[int] | None = None, on_checkpoint=None, device: str = "cpu"):
    """Train one zoo language model on ``texts``; return ``(model, info)``.

    Parameters
    ----------
    texts : training text (captions of every density, with question-answer pairs).
    tokenizer : the zoo tokenizer (``train_tokenizer``).
    arch : ``gpt2`` (causal LM) or ``bert`` (masked LM).
    n_layer, n_embd, n_head : transformer depth, width and heads.
    steps : optimiser steps (the training budget; the learning-rate schedule spans it);
        0 keeps the seeded random initialisation.
    context : most tokens per text (position embeddings); longer texts are truncated.
    batch_size : texts per step.
    lr, warmup, weight_decay : AdamW peak rate, warm-up steps, decoupled weight decay.
    seed : seeds initialisation, batch order and masking.
    checkpoints : steps (each in 0..steps) after which ``on_checkpoint(model, info)`` is
        called with the model in eval mode and the info so far (``info["steps"]`` = that
        step): the checkpoints of one run, as Pythia's, mid-schedule except the last.
    device : ``cpu`` (seeded: the same weights every time), ``cuda`` or ``auto``; batches and masks are drawn on
        the CPU either way, so a GPU run sees the same data (its weights differ by float rounding).

    Returns
    -------
    model : the trained model (eval mode, CPU).
    info : dict with the settings, parameter count, loss curve and wall time.
    """
    from tqdm import tqdm

    from prh.device import resolve_device

    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps={steps} must be >= 0 (0: untrained) and batch_size={batch_size} >= 1")
    checkpoints = sorted(set(checkpoints or []))
    if checkpoints and not 0 <= checkpoints[0] <= checkpoints[-1] <= steps:
        raise ValueError(f"checkpoints={checkpoints} must lie in 0..steps={steps}")
    full = tokenizer(texts)["input_ids"]
    n_truncated = sum(len(x) > context for x in full)
    ids = [x[:context] for x in full]
    lengths = np.array([len(x) for x in ids])
    torch.manual_seed(seed)
    dev = resolve_device(device)
    model = build_model(
        arch=arch, vocab_size=len(tokenizer), context=context, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
        pad_id=tokenizer.pad_token_id, bos_id=tokenizer.bos_token_id, eos_id=tokenizer.eos_token_id,
    ).to(dev)
    # decay matrices only: decaying biases and norm gains towards 0 only hurts
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    special_ids = torch.tensor(tokenizer.all_special_ids)
    batches: list[np.ndarray] = []
    curve, running = [], []
    start, start_cpu = time.perf_counter(), time.process_time()

    def info_at(step: int) -> dict:
        return {
            "arch": arch, "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head, "context": context,
            "vocab_size": len(tokenizer), "steps": step, "schedule_steps": steps, "batch_size": batch_size,
            "lr": lr, "warmup": warmup, "weight_decay": weight_decay, "seed": seed,
            "n_params": sum(p.numel() for p in model.parameters()), "n_texts": len(texts),
            "truncated_texts": int(n_truncated), "epochs": step * batch_size / len(texts),
            "final_loss": curve[-1]["loss"] if curve else None, "loss_curve": list(curve),
            # CPU seconds tell the cost apart from waiting on a shared machine
            "train_seconds": time.perf_counter() - start, "train_cpu_seconds": time.process_time() - start_cpu,
            "torch_threads": torch.get_num_threads(), "device": str(dev),
        }

    model.eval()
    if 0 in checkpoints and on_checkpoint is not None:
        on_checkpoint(model, info_at(0))
    model.train()
    for step in tqdm(range(steps), desc=f"train {arch}", mininterval=5):
        if not batches:
            batches = bucketed_batches(lengths, batch_size=batch_size, rng=rng)
        input_ids, attention = collate([ids[i] for i in batches.pop()], pad_id=tokenizer.pad_token_id)
        if arch == "gpt2":
            labels = input_ids.masked_fill(attention == 0, -100)
            # Right padding under a causal mask: a real token never attends to a pad (pads only
            # follow it), so the padding mask changes no real token's output and pads carry no
            # loss. Without it attention takes the is_causal kernel (~10% of a step's CPU time).
            attention = None
        else:
            input_ids, labels = mask_tokens(input_ids, special=torch.isin(input_ids, special_ids),
                                            mask_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                                            generator=gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps=steps, lr=lr, warmup=warmup)
        # no KV cache while training: it only builds the key/value tensors a generation would reuse
        loss = model(input_ids=input_ids.to(dev), attention_mask=attention if attention is None else attention.to(dev),
                     labels=labels.to(dev), use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == steps or step + 1 in checkpoints:
            curve.append({"step": step + 1, "loss": float(np.mean(running))})
            running = []
        if step + 1 in checkpoints and on_checkpoint is not None:
            model.eval()
            on_checkpoint(model, info_at(step + 1))
            model.train()
    model.eval()
    return model.cpu(), info_at(steps)


def save_checkpoint(out: str | os.PathLike, *, model=None, tokenizer=None, info: dict | None = None) -> Path:
    """Write a ``save_pretrained`` directory (model, tokenizer, ``training.json``) atomically."""
    with atomic_dir(out) as tmp:
        if model is not None:
            model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if info is not None:
            write_json(tmp / TRAINING_INFO, info)
    return Path(out)


def grammar_text() -> str:
    """Every word the world's grammar can write, as one text: templates, names (every synonym), regions, 0..100.

    Added to the tokenizer's training text so its vocabulary is the closed one of the
    grammar, not whatever a finite sample of captions happened to use.
    """
    from prh.data.captions import CONSTRUCTIONS, COUNT_WORDS, REGIONS, SIZE_WORDS
    from prh.data.vocabulary import BACKGROUNDS, CANONICAL

    words = [t.replace("{", " ").replace("}", " ") for ts in CONSTRUCTIONS.values() for t in ts]
    words += [t[0].upper() + t[1:] for ts in CONSTRUCTIONS.values() for t in ts]  # sentence-initial capitals
    words += [*CANONICAL, *BACKGROUNDS, *SIZE_WORDS.values(), *sum(REGIONS, ()), *COUNT_WORDS]
    words += [str(k) for k in range(101)] + ["An", "A", "objects", "shapes", "are", "is", "left", "right", "above",
                                             "below", "Q:", "A:", "?", "object"]
    return " ".join(words)


def run_train_tokenizer(*, data: str, out: str) -> Path:
    """Train the zoo's word-level tokenizer on ``data`` (every caption and question-answer pair) and the grammar."""
    from prh.data.qa import qa_pairs
    from prh.data.shapes import load_dataset

    texts = caption_texts(data) + [f"Q: {q} A: {a}." for scene in load_dataset(data).scenes
                                   for q, a in qa_pairs(scene)] + [grammar_text()]
    tokenizer = train_tokenizer(texts=texts)
    info = {"data": str(data), "n_texts": len(texts), "vocab_size": len(tokenizer), "kind": "word-level"}
    return save_checkpoint(out, tokenizer=tokenizer, info=info)


def run_train_language(*, data: str, tokenizer: str, out: str, threads: int = 1, qa_pairs: int = 0,
                       relational: float = 0.0, checkpoints: list[int] | None = None, **hparams) -> list[Path]:
    """Train one zoo run (``hparams``: see ``train_language_model``) and save its checkpoints.

    Without ``checkpoints`` the final model is saved to ``out``; with them, ``out`` must
    contain ``{steps}`` and each checkpoint goes to ``out.format(steps=k)`` as soon as
    step k is reached (each directory written atomically).
    """
    from transformers import AutoTokenizer

    if checkpoints and "{steps}" not in out:
        raise UsageError(f"out={out!r} must contain '{{steps}}' when checkpoints are given, e.g. "
                         "results/models/gpt2_s_r0_{steps}")
    from prh.device import set_threads

    set_threads(threads)
    if not Path(tokenizer, "tokenizer.json").is_file():
        raise UsageError(f"tokenizer={tokenizer!r} holds no tokenizer.json; run `prh train-tokenizer` first")
    tok = AutoTokenizer.from_pretrained(tokenizer)
    tok.model_max_length = hparams.get("context", 512)
    seed = hparams.get("seed", 0)
    texts = caption_texts(data, qa_pairs=qa_pairs, seed=seed, relational=relational)
    written = []

    def save(model, info):
        info.update(data=str(data), tokenizer=str(tokenizer), qa_pairs=qa_pairs, **({"relational": relational} if relational else {}))
        path = out.format(steps=info["steps"]) if checkpoints else out
        loss = "untrained" if info["final_loss"] is None else f"loss {info['final_loss']:.3f}"
        print(f"{path}: {info['n_params']} parameters, {info['steps']} steps, {loss}, "
              f"{info['train_seconds']:.1f} s on {threads} thread(s)", flush=True)
        written.append(save_checkpoint(path, model=model, tokenizer=tok, info=info))

    model, info = train_language_model(texts=texts, tokenizer=tok, checkpoints=checkpoints, on_checkpoint=save,
                                       **hparams)
    if not checkpoints:
        save(model, info)
    return written


def tokenizer_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh train-tokenizer", description=run_train_tokenizer.__doc__)
    parser.add_argument("--data", required=True, help="shapes dataset directory (training split)")
    parser.add_argument("--out", required=True, help="output directory (a save_pretrained tokenizer)")
    args = parser.parse_args(argv)
    run_train_tokenizer(data=args.data, out=args.out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh train-language", description=run_train_language.__doc__)
    parser.add_argument("--data", required=True, help="shapes dataset directory (training split)")
    parser.add_argument("--tokenizer", required=True, help="directory written by `prh train-tokenizer`")
    parser.add_argument("--out", required=True, help="output checkpoint directory; with --checkpoints a pattern "
                        "containing {steps}")
    parser.add_argument("--arch", required=True, choices=ARCHS)
    parser.add_argument("--n-layer", type=int, required=True)
    parser.add_argument("--n-embd", type=int, required=True)
    parser.add_argument("--n-head", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="optimiser steps (the training budget; 0: untrained)")
    parser.add_argument("--checkpoints", type=int, nargs="*", default=None, help="also save after these steps")
    parser.add_argument("--qa-pairs", type=int, default=0, help="question-answer pairs appended to each caption")
    parser.add_argument("--relational", type=float, default=0.0, help="share of relational question-answer slots")
    parser.add_argument("--context", type=int, default=512, help="most tokens per text (position embeddings)")
    parser.add_argument("--batch-size", type=int, default=16, help="texts per step")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak AdamW learning rate")
    parser.add_argument("--warmup", type=int, default=20, help="linear warm-up steps")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", choices=["auto", "cuda", "cpu"], help="where to train")
    args = parser.parse_args(argv)
    run_train_language(**vars(args))
