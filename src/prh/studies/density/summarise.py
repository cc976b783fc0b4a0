"""Dense captions summarised to ``num_words`` words by an instruct LLM (PRH section 6, Fig 9, appendix E).

The paper varies caption density on Densely Captioned Images (DCI): LLaMA3-8B-Instruct
summarises each dense caption "into about <num_words> words" with the system prompt of
appendix E (``SYSTEM_PROMPT``, verbatim); the user message is the original caption
itself (appendix E's ``user: <original_caption>``).

* Prompt: the tokenizer's chat template (``add_generation_prompt=True``) over
  ``[system, user]``. A tokenizer without one (the tiny test models) gets the plain text
  ``"<system>\\n\\n<caption>\\n"`` with its own special tokens, so the same code path runs.
* Decoding: greedy by default (deterministic, so a resumed job gives the same text);
  with ``do_sample`` batch k is seeded with ``SeedSequence([seed, k])``. Prompts are
  grouped per ``num_words`` level and by token length (``prh.features.length_batches``),
  padded on the left; ``max_new_tokens`` defaults to ``ceil(2.5 * num_words) + 16``.
* Clean-up: the first non-empty line (after any preamble line ending in ``:``), with
  quotes stripped. An empty summary falls back to the first ``num_words`` words of the
  caption and is flagged (``fallback``), so every density has a non-empty text.
* Resume: every finished batch is appended to a JSONL checkpoint (fsynced). Its first
  line is a fingerprint of model, tokenizer, prompt, captions, ``num_words``, seed and
  decoding; a checkpoint made for other settings is discarded (the differing keys are
  logged), a line cut short by a kill is dropped, finished items are not generated again.

``prh summarise-captions`` writes ``<out>/captions.jsonl`` in the dataset contract: per
item ``id``, ``text`` (the dense caption), ``texts`` = [summary for each num_words, in the
given order] + [the dense caption], ``num_words`` and ``n_words`` (words of each text),
so feature extraction reads density i with ``--text-field texts --text-index i``; and
``<out>/meta.json`` (last) with the prompt's SHA-256 and word-count statistics per level.
Images are not copied: the rows are those of ``<data>/images.npy`` (the first
``max_items`` when it is set).

    prh summarise-captions --data results/data/dci --model meta-llama/Meta-Llama-3-8B-Instruct \\
        --revision <sha> --num-words 5 10 20 50 100 --batch-size 8 --seed 0 --out results/data/dci/density
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from prh.batching import (
    check_texts,
    encode_texts,
    fingerprint,
    length_batches,
    model_id,
    pad_batch,
)
from prh.config import schema_defaults
from prh.device import DTYPES, place_model
from prh.io import atomic_path, read_jsonl, write_json, write_jsonl
from prh.errors import UsageError
from prh.studies.density.design import (
    FALLBACK_FORMAT,
    SYSTEM_PROMPT,
    USER_PROMPT,
    prompt_sha256,
)

DENSITY_DEFAULTS = schema_defaults("density")  # the `density` block's defaults: their one home is its schema

__all__ = ["SYSTEM_PROMPT", "USER_PROMPT", "build_messages", "prompt_text", "prompt_sha256",
           "default_max_new_tokens", "clean_summary", "summarise_captions", "run_summarise", "main"]

QUOTES = "\"'`“”‘’«»"


def check_num_words(num_words) -> list[int]:
    """The summary lengths: a non-empty list of distinct positive integers."""
    levels = list(num_words) if num_words is not None else []
    if not levels:
        raise ValueError("num_words is empty; give at least one summary length, e.g. --num-words 5 10 20 50 100")
    bad = [w for w in levels if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1]
    if bad:
        raise UsageError(f"num_words={levels}: {bad} are not positive integers; give word counts >= 1")
    if len(set(levels)) != len(levels):
        raise ValueError(f"num_words={levels} repeats a value; give each summary length once")
    return [int(w) for w in levels]


def build_messages(caption: str, num_words: int) -> list[dict]:
    """Appendix E's chat: system = ``SYSTEM_PROMPT`` with ``num_words``, user = the caption."""
    return [{"role": "system", "content": SYSTEM_PROMPT.replace("<num_words>", str(int(num_words)))},
            {"role": "user", "content": USER_PROMPT.replace("<original_caption>", caption)}]


def _has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_text(tokenizer, caption: str, num_words: int) -> str:
    """The text fed to the model: the chat template with a generation prompt, else ``FALLBACK_FORMAT``."""
    messages = build_messages(caption, num_words)
    if _has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return FALLBACK_FORMAT.format(system=messages[0]["content"], user=messages[1]["content"])


def default_max_new_tokens(num_words: int) -> int:
    """``ceil(2.5 * num_words) + 16``: English runs ~1.3 tokens per word; the rest is room for EOS."""
    return int(math.ceil(2.5 * num_words)) + 16


def clean_summary(text: str) -> str:
    """First non-empty line of a generation (a leading ``...:`` preamble line skipped), quotes stripped."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    while len(lines) > 1 and lines[0].endswith(":"):
        lines.pop(0)
    return lines[0].strip(QUOTES).strip() if lines else ""


def _key(item_id, num_words: int) -> tuple[str, int]:
    """Checkpoint key of one summary; the id as JSON, so any JSON id (int, str, list) keys it."""
    return json.dumps(item_id), int(num_words)


class BatchCheckpoint:
    """JSONL file: a header ``{"fingerprint", "config"}``, then one line per finished (id, num_words)."""

    def __init__(self, path, config: dict):
        self.path = Path(path) if path is not None else None
        self.done: dict[tuple, dict] = {}
        self._f = None
        if self.path is None:
            return
        header = {"fingerprint": fingerprint(config), "config": config}
        records = self._read(header)
        with atomic_path(self.path) as tmp, open(tmp, "w") as f:  # drops a line cut short by a kill
            for rec in [header, *records]:
                f.write(json.dumps(rec) + "\n")
        self.done = {_key(r["id"], r["num_words"]): r for r in records}
        self._f = open(self.path, "a")

    def _read(self, header: dict) -> list[dict]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        rows = []
        for n, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if n != len(lines) - 1:
                    raise ValueError(f"checkpoint {self.path} line {n + 1} is not JSON (not a cut-short last "
                                     "line); delete the file to start over") from None
        old = rows[0] if rows and isinstance(rows[0], dict) else {}
        if old.get("fingerprint") != header["fingerprint"]:
            before = old.get("config", {}) if isinstance(old.get("config"), dict) else {}
            diff = sorted(k for k in set(before) | set(header["config"]) if before.get(k) != header["config"].get(k))
            print(f"checkpoint {self.path} was made with other {', '.join(diff) or 'header'}; starting over",
                  file=sys.stderr)
            return []
        return rows[1:]

    def add(self, records: list[dict]) -> None:
        if self._f is None:
            return
        for rec in records:
            self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _generate_kwargs(*, do_sample: bool, pad_id: int) -> dict:
    """``generate`` arguments over the model's own generation config (its EOS ids, sampling settings)."""
    kw = {"do_sample": do_sample, "num_beams": 1, "pad_token_id": pad_id}
    if not do_sample:  # instruct checkpoints ship temperature/top_p for sampling; neutral values for greedy
        kw.update(temperature=1.0, top_p=1.0)
    return kw


@torch.inference_mode()
def summarise_captions(
    *, model, tokenizer, captions: list[str], num_words: list[int], ids: list | None = None,
    batch_size: int = DENSITY_DEFAULTS["batch_size"],
    max_new_tokens: int | None = None, do_sample: bool = False, seed: int = 0, checkpoint_path=None,
    fingerprint_extra: dict | None = None, progress: bool = True,
) -> list[dict]:
    """Summarise every caption to about each ``num_words`` words (appendix E).

    Parameters
    ----------
    model, tokenizer : a causal (instruct) LM already on its device, and its tokenizer.
    captions : the dense captions (non-empty strings).
    num_words : summary lengths in words, distinct positive integers.
    ids : one id per caption (default 0..N-1), unique; records are keyed by (id, num_words).
    batch_size : prompts per ``generate`` call (grouped by level and token length, left-padded).
    max_new_tokens : generation cap; None: ``default_max_new_tokens(num_words)`` per level.
    do_sample, seed : greedy (default) or sampling with the model's generation config,
        batch k seeded ``torch.manual_seed(SeedSequence([seed, k]))``.
    checkpoint_path : JSONL file to append finished batches to and resume from; None: no checkpoint.
    fingerprint_extra : more settings that must match for the checkpoint to be reused (model name, revision).

    Returns
    -------
    One record per (caption, level), caption-major in the given orders: ``id``, ``num_words``,
    ``text`` (cleaned summary), ``n_words = len(text.split())``, ``raw`` (the generation),
    ``fallback`` (True when the summary came out empty and ``text`` is the caption's first words).
    """
    levels = check_num_words(num_words)
    captions = check_texts(captions)
    ids = list(range(len(captions))) if ids is None else list(ids)
    if len(ids) != len(captions) or len(set(map(json.dumps, ids))) != len(ids):
        raise ValueError(f"ids must be {len(captions)} unique values, one per caption; got {len(ids)} "
                         f"with {len(ids) - len(set(map(json.dumps, ids)))} repeats")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1 (or None: from num_words)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    templated = _has_chat_template(tokenizer)
    config = {
        "model": [*model_id(model), str(next(model.parameters()).dtype)],
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), fingerprint(tokenizer.chat_template or "")],
        "prompt_sha256": prompt_sha256(), "captions_sha256": fingerprint([ids, captions]), "num_words": levels,
        "seed": seed, "do_sample": do_sample, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
        **(fingerprint_extra or {}),
    }
    ckpt = BatchCheckpoint(checkpoint_path, config)
    gen = _generate_kwargs(do_sample=do_sample, pad_id=pad_id)
    dev = model.get_input_embeddings().weight.device

    encodings, batches = [], []  # batches: (level index, caption indices)
    for li, w in enumerate(levels):
        enc = encode_texts(tokenizer, [prompt_text(tokenizer, c, w) for c in captions], add_special_tokens=not templated)
        encodings.append([{k: e[k] for k in ("input_ids", "attention_mask")} for e in enc])
        batches += [(li, idx) for idx in length_batches([len(e["input_ids"]) for e in enc], batch_size)]
    total = len(captions) * len(levels)
    if ckpt.done:
        print(f"resuming from {checkpoint_path}: {len(ckpt.done)} of {total} summaries done", file=sys.stderr)

    results, generated = dict(ckpt.done), 0
    try:
        for k, (li, idx) in enumerate(tqdm(batches, desc="summary batches", disable=not progress)):
            w = levels[li]
            todo = [int(i) for i in idx if _key(ids[i], w) not in results]
            if not todo:
                continue
            if do_sample:
                torch.manual_seed(int(np.random.SeedSequence([seed, k]).generate_state(1)[0]))
            batch = pad_batch([encodings[li][i] for i in todo], pad_id=pad_id, side="left")
            out = model.generate(input_ids=batch["input_ids"].to(dev), attention_mask=batch["attention_mask"].to(dev),
                                 **gen, max_new_tokens=max_new_tokens or default_max_new_tokens(w))
            raws = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:].cpu(), skip_special_tokens=True)
            records = []
            for i, raw in zip(todo, raws):
                text = clean_summary(raw)
                fallback = not text
                if fallback:
                    text = " ".join(captions[i].split()[:w])
                records.append({"id": ids[i], "num_words": w, "text": text, "n_words": len(text.split()),
                                "raw": raw, "fallback": fallback})
            ckpt.add(records)
            results.update({_key(r["id"], w): r for r in records})
            generated += len(records)
    finally:
        ckpt.close()
    print(f"generated {generated} of {total} summaries ({total - generated} from the checkpoint)", file=sys.stderr)
    return [results[_key(i, w)] for i in ids for w in levels]


def _word_stats(counts) -> dict:
    c = np.asarray(counts, dtype=float)
    return {"mean": float(c.mean()), "median": float(np.median(c)), "min": int(c.min()), "max": int(c.max())}


def run_summarise(
    *, data, model: str, out, num_words, revision: str | None = None, batch_size: int = DENSITY_DEFAULTS["batch_size"],
    max_items: int | None = None, seed: int = 0, device: str = "auto", dtype: str = "auto",
    max_new_tokens: int | None = None, do_sample: bool = False, checkpoint=None, progress: bool = True,
    device_map: str | None = None,
) -> dict:
    """Summaries of ``<data>/captions.jsonl`` (field ``text``) at every ``num_words``, written to ``out``.

    Parameters
    ----------
    data : a dataset dir (``results/data/dci``) with ``captions.jsonl``.
    model, revision : an instruct causal LM for ``prh.models.loaders.load_language_model``.
    out : output dir; gets ``captions.jsonl`` (dataset contract, ``texts`` = summaries + dense
        caption last) and ``meta.json``.
    num_words : summary lengths, in the order of ``texts``.
    max_items : summarise only the first ``max_items`` captions; None: all.
    checkpoint : resumable JSONL (default ``<out>.partial.jsonl``), deleted after the outputs are written.
    batch_size, seed, device, dtype, max_new_tokens, do_sample : see ``summarise_captions``.
    device_map : ``"auto"`` spreads a captioner too large for one GPU over the job's GPUs (the
        workflow passes it when ``prh.cluster.gpus_needed`` gives more than one).

    Returns
    -------
    The meta dict written to ``meta.json``.
    """
    from prh.models import loaders

    levels = check_num_words(num_words)
    path = Path(data) / "captions.jsonl"
    if not path.exists():
        raise UsageError(f"data={str(data)!r} has no captions.jsonl; build the dataset first (snakemake {path})")
    if max_items is not None and max_items < 1:
        raise ValueError(f"max_items={max_items} must be >= 1 (or None: every caption)")
    rows = read_jsonl(path)[:max_items]
    bad = [r.get("id", n) for n, r in enumerate(rows) if not isinstance(r.get("text"), str) or not r["text"].strip()]
    if not rows or bad:
        raise ValueError(f"{path}: every record needs a non-empty 'text' (the dense caption); "
                         f"{'there are no records' if not rows else f'ids {bad[:5]} have none'}")
    ids = [r.get("id", n) for n, r in enumerate(rows)]
    net, tok, dev, dt = loaders.load_causal_lm(
        model, revision=revision, device=device, dtype=dtype, device_map=device_map,
        needs="summaries need an instruct LLM such as meta-llama/Meta-Llama-3-8B-Instruct")
    place_model(net, dev, dt)
    out = Path(out)
    checkpoint = Path(checkpoint) if checkpoint is not None else Path(str(out).rstrip("/") + ".partial.jsonl")
    summaries = summarise_captions(
        model=net, tokenizer=tok, captions=[r["text"] for r in rows], num_words=levels, ids=ids,
        batch_size=batch_size, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed,
        checkpoint_path=checkpoint, fingerprint_extra={"source": str(model), "revision": revision},
        progress=progress)

    per_item = [summaries[n * len(levels):(n + 1) * len(levels)] for n in range(len(rows))]
    records = []
    for item_id, row, summ in zip(ids, rows, per_item):
        texts = [s["text"] for s in summ] + [row["text"]]
        rec = {"id": item_id, "text": row["text"], "texts": texts, "num_words": levels,
               "n_words": [len(t.split()) for t in texts]}
        if "source_index" in row:
            rec["source_index"] = row["source_index"]
        records.append(rec)
    word_counts = {}
    for li, w in enumerate(levels):
        word_counts[str(w)] = {**_word_stats([s[li]["n_words"] for s in per_item]),
                               "n_fallback": sum(s[li]["fallback"] for s in per_item)}
    word_counts["original"] = {**_word_stats([len(r["text"].split()) for r in rows]), "n_fallback": 0}
    for level, st in word_counts.items():
        print(f"num_words {level}: words mean {st['mean']:.1f}, median {st['median']:.1f}, "
              f"min {st['min']}, max {st['max']}, empty->fallback {st['n_fallback']}", file=sys.stderr)
    write_jsonl(out / "captions.jsonl", records)
    meta = {
        "source": "summarise-captions", "data": str(data), "dataset": Path(data).name, "model": str(model),
        "revision": revision, "system_prompt": SYSTEM_PROMPT, "user_prompt": USER_PROMPT,
        "prompt_sha256": prompt_sha256(), "chat_template": _has_chat_template(tok), "num_words": levels,
        "text_index": {**{str(w): li for li, w in enumerate(levels)}, "original": len(levels)},
        "seed": seed, "do_sample": do_sample, "max_new_tokens": max_new_tokens or
        {str(w): default_max_new_tokens(w) for w in levels}, "batch_size": batch_size, "max_items": max_items,
        "dtype": str(dt).removeprefix("torch."), "count": len(records), "word_counts": word_counts,
    }
    write_json(out / "meta.json", meta)  # last: its presence marks a complete folder
    checkpoint.unlink(missing_ok=True)
    del net
    loaders.free_model_memory()
    return meta


def main(argv: list[str] | None = None) -> None:
    from prh.io import none_or
    from prh.slices import add_slice
    from prh.studies.density.design import SUMMARISE_CONFIG

    p = argparse.ArgumentParser(prog="prh summarise-captions", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="dataset dir with captions.jsonl (field text = dense caption)")
    p.add_argument("--model", required=True, help="instruct causal LM: hub repo id or save_pretrained dir")
    p.add_argument("--revision", type=none_or(str), default=None, help="hub revision (commit hash)")
    p.add_argument("--out", required=True, help="output dir, e.g. results/data/dci/density")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    p.add_argument("--device-map", default=None, help="'auto' to spread a large captioner over the GPUs")
    p.add_argument("--do-sample", action="store_true", help="sample (model's generation config) instead of greedy")
    p.add_argument("--checkpoint", default=None, help="resumable JSONL; default <out>.partial.jsonl")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    settings = add_slice(p, SUMMARISE_CONFIG)  # num_words, batch_size, max_new_tokens, max_items, seed
    a = p.parse_args(argv)
    meta = run_summarise(data=a.data, model=a.model, out=a.out, revision=a.revision, **settings(a)["density"],
                         device=a.device, dtype=a.dtype, do_sample=a.do_sample,
                         checkpoint=a.checkpoint, progress=not a.no_progress, device_map=a.device_map)
    print(f"{a.out}: {meta['count']} captions x {len(meta['num_words'])} summary lengths")
