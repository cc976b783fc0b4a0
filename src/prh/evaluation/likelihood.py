"""LM likelihood: one home for next-token cross-entropy, bits per byte and multiple choice.

Multiple choice as lm-evaluation-harness scores HellaSwag (``choice_logprobs``): the summed
log-likelihood of each ending given the context; ``acc`` takes the argmax of the sum,
``acc_norm`` of the sum divided by the ending's UTF-8 bytes (``mc_scores``).

Bits-per-byte (PRH Figure 3's x-axis): ``bpb(t) = sum_j -log2 p(x_j | x_<j) / bytes_utf8(t)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from prh.batching import check_texts, encode_texts, forward_inputs, group_starts, run_batches
from prh.device import place_model, resolve_device, resolve_dtype

__all__ = ["start_token", "token_nats", "bits_per_byte", "bpb_encodings", "bpb_from_nats", "fused_bpb_tail",
           "tail_nats", "hidden_nats", "choice_logprobs", "mc_scores"]


def start_token(tokenizer) -> int | None:
    """The context-only token put before a scored text: the tokenizer's BOS, else its EOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def token_nats(logits: torch.Tensor, ids: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """Per row, the summed cross-entropy (nats) of the next-token targets ``ids[:, 1:]``
    where ``scored`` (B x T-1) is true; float64, one value per row. Rows are done one at
    a time, which bounds the float32 T x V copy of the logits."""
    nats = []
    for b in range(logits.shape[0]):
        ce = F.cross_entropy(logits[b, :-1].float(), ids[b, 1:], reduction="none")
        nats.append(torch.where(scored[b], ce, 0.0).sum())
    return torch.stack(nats).double()


def bpb_encodings(tokenizer, texts) -> list[dict]:
    """What bits per byte scores: each text without special tokens, after one start token (``start_token``)."""
    start = start_token(tokenizer)
    encodings = encode_texts(tokenizer, texts, add_special_tokens=False)
    if start is not None:
        encodings = [{k: [start if k == "input_ids" else (1 if k == "attention_mask" else 0)] + list(v)
                      for k, v in e.items()} for e in encodings]
    return encodings


def bpb_from_nats(nats, texts, samples_per_item=None) -> np.ndarray:
    """Bits per byte from each text's summed nats: per text, or per item (its texts' bits over their bytes)."""
    nbytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.float64)
    bits = np.array([float(x) for x in nats]) / math.log(2)
    if samples_per_item is None:
        return bits / nbytes
    starts = group_starts(samples_per_item, len(texts))
    return np.add.reduceat(bits, starts) / np.add.reduceat(nbytes, starts)


def tail_nats(logits: torch.Tensor, batch: dict, *, tail: int) -> torch.Tensor:
    """``token_nats`` of a batch, leaving the last ``tail`` real tokens of each row unscored: a feature pass over
    ``[start] + text + tail`` scores what ``bits_per_byte`` scores on ``[start] + text`` (causal attention: no
    earlier position sees the tail)."""
    ids = batch["input_ids"].to(logits.device)
    mask = batch["attention_mask"].to(logits.device).bool()
    keep = mask & (mask.flip(1).cumsum(1).flip(1) > tail)  # real tokens with more than `tail` real ones at or after
    return token_nats(logits, ids, keep[:, 1:] & keep[:, :-1])


def hidden_nats(model, hidden: torch.Tensor, batch: dict, *, tail: int) -> torch.Tensor:
    """``tail_nats`` from the final hidden states, the LM head applied here (``fused_bpb_tail`` checks it gives the
    model's own logits)."""
    return tail_nats(model.get_output_embeddings()(hidden), batch, tail=tail)


@torch.inference_mode()
def fused_bpb_tail(model, tokenizer, texts, feature_encodings, *, device="cpu", dtype=torch.float32) -> int | None:
    """Can one feature pass also give bits per byte? The number ``tail`` of tokens the tokenizer appends after
    ``bpb_encodings`` (the same for every text), when: the model is a causal LM with an output embedding, padding
    is on the right, every feature encoding is the bpb encoding plus the same tail, and on the first text the head
    on the base model's last hidden state gives the model's own logits (rtol 1e-5) whose ``tail_nats`` equal the
    nats of its bpb encoding (rtol 1e-4: sequences of other lengths). Otherwise None: two passes."""
    if tokenizer.padding_side != "right" or model.get_output_embeddings() is None or not texts:
        return None
    scored = bpb_encodings(tokenizer, texts)
    tails = {tuple(f["input_ids"][len(b["input_ids"]):]) for f, b in zip(feature_encodings, scored)}
    if len(tails) != 1 or any(f["input_ids"][:len(b["input_ids"])] != b["input_ids"]
                              for f, b in zip(feature_encodings, scored)):
        return None
    tail = len(next(iter(tails)))
    dev = place_model(model, device, resolve_dtype(dtype, resolve_device(device)))
    one = {k: torch.tensor([v]) for k, v in feature_encodings[0].items()}
    ref = {k: torch.tensor([v]) for k, v in scored[0].items()}
    base = model.base_model
    hidden = base(**forward_inputs(base, one, dev, use_cache=False)).last_hidden_state
    head = model.get_output_embeddings()(hidden)
    own = model(**forward_inputs(model, one, dev, use_cache=False)).logits
    if head.shape != own.shape or not torch.allclose(head.float(), own.float(), rtol=1e-5, atol=1e-5):
        return None  # the model does more than the head (logit scaling, soft-capping): two passes
    logits = model(**forward_inputs(model, ref, dev, use_cache=False)).logits
    mask = ref["attention_mask"].to(logits.device).bool()
    direct = token_nats(logits, ref["input_ids"].to(logits.device), mask[:, 1:] & mask[:, :-1])
    return tail if torch.allclose(tail_nats(own, one, tail=tail), direct, rtol=1e-4, atol=1e-6) else None


@torch.inference_mode()
def bits_per_byte(
    model, tokenizer, texts, *, batch_size=32, device="cpu", dtype=torch.float32, group_by_length=True,
    max_batch_tokens=None, checkpoint_dir=None, progress=True, samples_per_item=None,
) -> np.ndarray:
    """Bits-per-byte of each text under a causal LM (PRH Figure 3).

    ``bpb(t) = sum_{j>=1} -log2 p(x_j | x_0..x_{j-1}) / len(t.encode("utf-8"))``.
    BOS: the text is tokenised without special tokens and one start token x_0 is
    prepended (the tokenizer's BOS, else its EOS, e.g. GPT-2's ``<|endoftext|>``);
    x_0 is context only, so every token of the text is scored and the byte count is
    the text's own. A tokenizer with neither leaves the first text token unscored.

    ``samples_per_item`` (K_1..K_N, see ``prh.batching.group_starts``): the texts are N items'
    samples, concatenated; item i's value is its total bits over its total bytes,
    ``bpb_i = sum_k bits(t_ik) / sum_k bytes(t_ik)`` (all texts run in one length-grouped pass).

    Returns
    -------
    float64 array, one value per text (per item with ``samples_per_item``).
    """
    texts = check_texts(texts)
    if samples_per_item is not None:
        group_starts(samples_per_item, len(texts))  # checked before the pass
    encodings = bpb_encodings(tokenizer, texts)

    def step(batch, dev):
        logits = model(**forward_inputs(model, batch, dev, use_cache=False)).logits
        ids = batch["input_ids"].to(logits.device)
        mask = batch["attention_mask"].to(logits.device).bool()
        scored = mask[:, 1:] & mask[:, :-1]  # target and its context both real tokens
        return token_nats(logits, ids, scored)

    nats = run_batches(model, tokenizer, encodings, batch_size=batch_size, device=device, dtype=dtype,
                         group_by_length=group_by_length, checkpoint_dir=checkpoint_dir, tag="bpb",
                         key=[start_token(tokenizer)], progress=progress, step=step, max_tokens=max_batch_tokens)
    return bpb_from_nats(nats, texts, samples_per_item)


def _encode_choices(tokenizer, contexts: list[str], endings: list[list[str]], *, max_length: int | None) -> list[dict]:
    """lm-evaluation-harness style requests: [start] + tok(context) + tok(context + ending)[len(tok(context)):].

    Trailing whitespace of a context moves to the front of its ending (as the harness does);
    the start token (BOS, else EOS) is context only. ``ending_mask`` marks the scored tokens.
    Sequences longer than ``max_length`` lose their oldest context tokens.
    """
    start = start_token(tokenizer)
    prefix = [] if start is None else [start]
    out = []
    ctx_ids = tokenizer(list(contexts), add_special_tokens=False)["input_ids"]
    for c, ctx, ends in zip(ctx_ids, contexts, endings):
        stripped = ctx.rstrip()
        moved = ctx[len(stripped):]
        if moved:
            c = tokenizer(stripped, add_special_tokens=False)["input_ids"]
        whole = tokenizer([stripped + moved + e for e in ends], add_special_tokens=False)["input_ids"]
        for e, w in zip(ends, whole):
            cont = w[len(c):]
            if not cont:
                raise ValueError(f"ending {e!r} gives no tokens after its context; endings must be non-empty")
            ids = prefix + list(c) + list(cont)
            mask = [0] * (len(ids) - len(cont)) + [1] * len(cont)
            if max_length is not None and len(ids) > max_length:
                if len(cont) >= max_length:
                    raise ValueError(f"ending {e!r} has {len(cont)} tokens; the model's context is {max_length}")
                ids, mask = ids[-max_length:], mask[-max_length:]
            out.append({"input_ids": ids, "attention_mask": [1] * len(ids), "ending_mask": mask})
    return out


def choice_logprobs(model, tokenizer, contexts, endings, *, batch_size: int = 32, device="cpu", dtype="float32",
                    progress: bool = False) -> np.ndarray:
    """Summed log-likelihood of each ending given its context under a causal LM.

    ``L(c, e) = sum_{j in e} log p(x_j | x_<j)`` in nats, over the tokens of the ending
    only, as lm-evaluation-harness scores multiple-choice tasks (HellaSwag): the text
    ``c + e`` is tokenised whole and the tokens past ``tokenize(c)`` are the ending's;
    one start token (BOS, else EOS) is prepended as context. Batching, length grouping
    and padding are ``prh.batching.run_batches``': left or right padding give
    the same numbers.

    Parameters
    ----------
    model, tokenizer : a causal LM and its tokenizer (``prh.models.loaders.load_language_model``).
    contexts : N non-empty strings.
    endings : N lists of C non-empty strings (HellaSwag: each starts with a space).
    batch_size, device, dtype : as in ``bits_per_byte``.

    Returns
    -------
    float64 array N x C.
    """
    contexts = check_texts(contexts)
    endings = [list(e) for e in endings]
    if len(endings) != len(contexts) or len({len(e) for e in endings}) > 1 or not endings[0]:
        raise ValueError("endings must be one non-empty list per context, all of the same length")
    check_texts([e for ends in endings for e in ends])
    cfg = getattr(model, "config", None)
    max_length = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    encodings = _encode_choices(tokenizer, contexts, endings, max_length=max_length)

    def step(batch, dev):
        logits = model(**forward_inputs(model, batch, dev, use_cache=False)).logits
        ids = batch["input_ids"].to(logits.device)
        return -token_nats(logits, ids, batch["ending_mask"].to(logits.device).bool()[:, 1:])

    with torch.inference_mode():
        rows = run_batches(model, tokenizer, encodings, batch_size=batch_size, device=device, dtype=dtype,
                                group_by_length=True, checkpoint_dir=None, tag="choices", key=None,
                                progress=progress, step=step)
    return np.array([float(r) for r in rows]).reshape(len(contexts), len(endings[0]))


def mc_scores(logprobs, endings, labels) -> dict:
    """``acc`` = mean [argmax_c L_ic = y_i]; ``acc_norm`` = mean [argmax_c L_ic / bytes(e_ic) = y_i].

    Ties go to the first ending (numpy argmax), as in lm-evaluation-harness.
    """
    lp = np.asarray(logprobs, dtype=float)
    labels = np.asarray(labels)
    nbytes = np.array([[len(e.encode("utf-8")) for e in ends] for ends in endings], dtype=float)
    if lp.shape != nbytes.shape or labels.shape != (lp.shape[0],):
        raise ValueError(f"logprobs {lp.shape}, endings {nbytes.shape} and labels {labels.shape} disagree")
    return {"acc": float(np.mean(lp.argmax(1) == labels)), "acc_norm": float(np.mean((lp / nbytes).argmax(1) == labels))}
