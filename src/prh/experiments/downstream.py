"""Alignment predicts downstream performance (PRH section 2.5, Figure 4).

The paper plots, for each LLM, its mutual-kNN alignment to the strongest vision model
(DINOv2 ViT-g) against its score on HellaSwag (commonsense) and GSM8K (math), marker
size by parameter count, colour by the rank of its language-modelling score 1 - bpb.
Two sources of downstream scores feed the same figure:

* **offline** (``prh downstream-mc``): a HellaSwag-style multiple-choice task built from
  the shapes world (``build_items``), scored like lm-evaluation-harness scores HellaSwag
  (``choice_logprobs``: summed log-likelihood of each ending given the context; ``acc``
  takes the argmax of the sum, ``acc_norm`` of the sum divided by the ending's UTF-8 bytes).
  Masked LMs (BERT, MiniLM) have no next-token probabilities: they are skipped and listed.
* **paper**: a CSV of published scores (``read_published_scores``,
  ``workflow/resources/paper_downstream_scores.csv``), or of lm-evaluation-harness runs.

``figure4`` joins the scores with an alignment JSON (language x vision) and the LMs'
bits-per-byte, and gives per task the points, a least-squares line and Pearson /
Spearman r with p-values. The strongest vision model is, offline, the one with the
highest mean probe accuracy (``strongest_vision_model``); in the paper suite it is named
(``vit-giant-dinov2``).

    prh downstream-mc --data results/data/shapes_eval --models results/models/gpt2_s_100 ... \\
        --names gpt2_s_100 ... --out results/experiments/downstream/shapes_mc.json --n-items 512
    prh downstream --cross-alignment results/alignment/shapes_eval/mutual_knn/zoo_language__zoo_vision.json \\
        --scores results/experiments/downstream/shapes_mc.json --probes results/experiments/zoo/vision.json \\
        --language results/experiments/zoo/language.json --out-dir results/experiments/downstream
    prh downstream --cross-alignment results/alignment/wit_1024/mutual_knn/prh_test_language__prh_val_vision.json \\
        --scores workflow/resources/paper_downstream_scores.csv --strongest-vision vit-giant-dinov2 \\
        --language results/experiments/lm_score/*.json --out-dir results/experiments/downstream_paper
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import time
from pathlib import Path

import numpy as np

from prh.experiments.convergence import correlations
from prh.io import read_json, read_jsonl, write_json

__all__ = ["TASK", "LEVEL", "ITEM_KINDS", "PAPER_TASKS", "build_items", "load_items", "contradictions",
           "choice_logprobs", "mc_scores", "run_downstream_offline", "strongest_vision_model",
           "read_published_scores", "figure4", "run_figure4", "mc_main", "main"]

TASK = ("HellaSwag-style caption completion in the shapes world: given the start of a coordinates-level "
        "caption (object list, background, each object's size, grid region and centre, relations so far), "
        "choose the caption's own continuation among endings of one template that differ in one slot and "
        "contradict the context: which objects a relation names (entity), left/right x above/below "
        "(relation), or the centre that follows a stated grid region (region).")
LEVEL = 5  # captions at the "coordinates" density: the context states every object's centre
PAPER_TASKS = ("hellaswag", "gsm8k")
CSV_COLUMNS = ("model", "hellaswag", "gsm8k", "hellaswag_setting", "gsm8k_setting", "source")
OFFLINE_TASKS = {"shapes_mc_acc_norm": "acc_norm", "shapes_mc_acc": "acc"}


# ---------------------------------------------------------------- the multiple-choice task


def _templates(kind: str):
    from prh.data.captions import CONSTRUCTIONS, _compile

    return [(t, _compile(t)) for t in CONSTRUCTIONS[kind]]


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=\.)\s+", text.strip())


def _render(template: str, **slots) -> str:
    s = template.format(**slots)
    return s[0].upper() + s[1:]


def _match(sentence: str, templates) -> tuple[str, dict] | None:
    low = sentence[0].lower() + sentence[1:]
    for template, pattern in templates:
        m = pattern.fullmatch(low)
        if m:
            return template, m.groupdict()
    return None


def _cells(p: int) -> set[int]:
    """Grid rows / columns (0, 1, 2) a whole percent p can come from: [p - 0.5, p + 0.5] / 100 in thirds."""
    return {min(int(v / 100 * 3), 2) for v in (p - 0.5, p, p + 0.5) if 0 <= v <= 100}


def contradictions(text: str) -> list[str]:
    """Facts of a caption-grammar text that contradict other facts of the same text.

    The text is read with ``prh.data.captions.parse_caption``. Reported: an object named
    outside the object list; a count other than the list's length; an attribute (size,
    region, centre, background) stated twice with different values; a grid region that
    the stated centre cannot lie in (a whole percent p stands for [p - 0.5, p + 0.5]);
    ``left_of(a, b)`` with a's centre right of b's (x_a > x_b), ``above(a, b)`` with
    y_a > y_b (y grows downwards). Equal percents decide no relation. An empty list means
    the text is self-consistent.
    """
    from prh.data.captions import REGIONS, parse_caption

    facts = parse_caption(text)
    cell = {name: (r, c) for r, row in enumerate(REGIONS) for c, name in enumerate(row)}
    names = {f[1] for f in facts if f[0] == "object"}
    listed = any(f[0] == "count" for f in facts)
    out = []
    seen: dict = {}
    for f in sorted(facts, key=str):
        kind = f[0]
        mentioned = f[1:3] if kind in ("left_of", "above") else f[1:2] if kind in ("size", "region", "position") else ()
        out += [f"{n!r} is not in the object list" for n in mentioned if listed and n not in names]
        if kind in ("size", "region", "position", "background"):
            key = (kind, f[1]) if kind != "background" else ("background",)
            if key in seen and seen[key] != f:
                out.append(f"{seen[key]} and {f} disagree")
            seen[key] = f
        if kind == "count" and f[1] != len(names):
            out.append(f"count {f[1]} but {len(names)} objects listed")
    pos = {f[1]: (f[2], f[3]) for f in facts if f[0] == "position"}
    for f in facts:
        if f[0] == "region" and f[1] in pos:
            row, col = cell[f[2]]
            x, y = pos[f[1]]
            if col not in _cells(x) or row not in _cells(y):
                out.append(f"{f[1]} is said to be in the {f[2]} but centred at ({x}, {y})")
        if f[0] in ("left_of", "above") and f[1] in pos and f[2] in pos:
            axis = 0 if f[0] == "left_of" else 1
            if pos[f[1]][axis] > pos[f[2]][axis]:
                out.append(f"{f} but the centres are {pos[f[1]]} and {pos[f[2]]}")
    return out


def _entity_item(scene, sentences, rng, n_choices):
    """A relation sentence; one name slot (subject or other) takes n_choices names, one of them in the scene."""
    from prh.data.captions import object_name
    from prh.data.shapes import COLORS, SHAPES

    pairs = [(k, *m) for k, s in enumerate(sentences) if (m := _match(s, _templates("pair")))]
    if not pairs:
        return None
    k, template, g = pairs[int(rng.integers(len(pairs)))]
    slot = ("obj", "other")[int(rng.integers(2))]
    color, shape = g[slot].split(" ")
    names = {object_name(o) for o in scene["objects"]}
    if rng.integers(2):
        options = [f"{c} {shape}" for c in COLORS if f"{c} {shape}" not in names]
    else:
        options = [f"{color} {s}" for s in SHAPES if f"{color} {s}" not in names]
    others = [options[j] for j in rng.choice(len(options), size=n_choices - 1, replace=False)]
    endings = [" " + _render(template, **{**g, slot: n}) for n in [g[slot], *others]]
    return " ".join(sentences[:k]), endings


def _relation_item(scene, sentences, rng, n_choices):
    """A relation sentence; (left|right) x (above|below): the full 2 x 2 grid (4 choices) or one flipped axis (2)."""
    from prh.data.captions import object_name

    pos = {object_name(o): (round(100 * o["x"]), round(100 * o["y"])) for o in scene["objects"]}
    usable = []
    for k, s in enumerate(sentences):
        m = _match(s, _templates("pair"))
        if m:
            a, b = pos[m[1]["obj"]], pos[m[1]["other"]]
            axes = [ax for ax in (0, 1) if a[ax] != b[ax]]  # an axis the context's percents decide
            if len(axes) == 2 or (n_choices == 2 and axes):
                usable.append((k, *m, axes))
    if not usable:
        return None
    k, template, g, axes = usable[int(rng.integers(len(usable)))]
    flip_h, flip_v = {"left": "right", "right": "left"}, {"above": "below", "below": "above"}
    if n_choices == 4:
        variants = [(g["h"], g["v"]), (flip_h[g["h"]], g["v"]), (g["h"], flip_v[g["v"]]), (flip_h[g["h"]], flip_v[g["v"]])]
    else:
        ax = axes[int(rng.integers(len(axes)))]
        variants = [(g["h"], g["v"]), (flip_h[g["h"]], g["v"]) if ax == 0 else (g["h"], flip_v[g["v"]])]
    endings = [" " + _render(template, **{**g, "h": h, "v": v}) for h, v in variants]
    return " ".join(sentences[:k]), endings


def _region_item(scene, sentences, rng, n_choices):
    """An object's sentence cut after its grid region; the centre takes its mirror images (corner objects only)."""
    from prh.data.captions import object_name

    corner = [object_name(o) for o in scene["objects"]
              if all(10 <= p <= 32 or 68 <= p <= 90 for p in (round(100 * o["x"]), round(100 * o["y"])))]
    usable = [(k, *m) for k, s in enumerate(sentences) if (m := _match(s, _templates("coord"))) and m[1]["obj"] in corner]
    if not usable:
        return None
    k, template, g = usable[int(rng.integers(len(usable)))]
    x, y = int(g["x"]), int(g["y"])
    if n_choices == 4:
        variants = [(x, y), (100 - x, y), (x, 100 - y), (100 - x, 100 - y)]
    else:
        variants = [(x, y), (100 - x, y) if rng.integers(2) else (x, 100 - y)]
    prefix = _render(template[: template.index("{region}") + len("{region}")], **g)
    full = [_render(template, **{**g, "x": vx, "y": vy}) for vx, vy in variants]
    return " ".join([*sentences[:k], prefix]), [f[len(prefix):] for f in full]


ITEM_KINDS = {"entity": _entity_item, "relation": _relation_item, "region": _region_item}


def build_items(scenes: list[dict], texts: list[str], *, n_items: int, n_choices: int = 4, seed: int = 0,
                kinds: tuple[str, ...] = tuple(ITEM_KINDS)) -> list[dict]:
    """Multiple-choice items, HellaSwag-style, from shapes-world scenes and their captions.

    Every item is a context (the start of a scene's coordinates-level caption: object list,
    background, each object's size, grid region and centre in percent, then one sentence
    per pair of objects) and ``n_choices`` endings of one template that differ in one slot.
    Exactly one ending is the caption's own continuation; every other one contradicts the
    context (``contradictions(context + ending)`` is non-empty) and the scene. Three kinds,
    balanced over the items (``permutation(arange(n_items) % len(kinds))``):

    * ``entity``: context = the caption up to a relation sentence; the endings are that
      sentence with the subject's (or the other object's) colour, or shape, replaced by
      names of no object in the scene, hence outside the context's object list.
    * ``relation``: the same cut; the endings are the 2 x 2 grid left/right x
      above/below (``n_choices=2``: one axis flipped). Only pairs whose centres differ in
      both whole percents, so the context's coordinates decide every cell.
    * ``region``: context = the caption up to an object's sentence, plus that sentence up
      to its grid region ("... sits in the upper left"); the endings are the rest of the
      sentence with the centre (x, y), (100 - x, y), (x, 100 - y), (100 - x, 100 - y)
      (``n_choices=2``: one mirror image). Only objects with both percents in 10..32 or
      68..90: every mirror image lies in another corner cell and has as many digits.

    Why these sets: each is the same whichever member is true (an orbit of a symmetry of
    the world: colours, shapes, left-right and up-down mirroring), so a scorer that ignores
    the context picks the true ending with probability exactly 1 / n_choices, and
    endings differ by one word or number of equal length, so length and style do not
    give the answer away. (Varying a different slot in each distractor would not do: the
    true ending would be the "centre" of the set, and a context-blind scorer would pick it
    with probability 1 / 2^(n_choices - 1).) Scenes are drawn without replacement in a
    seeded order, each item from the next scene that can host its kind; the true ending's
    position is balanced: ``permutation(arange(n_items) % n_choices)``.

    Parameters
    ----------
    scenes : scene dicts (``prh.data.shapes.sample_scene``'s format).
    texts : each scene's level-5 (coordinates) caption (``captions.jsonl`` ``texts[5]``);
        it must state exactly ``scene_facts(scene, level=5)``.
    n_items : number of items.
    n_choices : endings per item, 2 or 4.
    seed : seed of every draw.
    kinds : item kinds to use, a subset of ``ITEM_KINDS``.

    Returns
    -------
    list of {"scene": index, "kind": str, "context": str, "endings": [str], "label": int}
    """
    from prh.data.captions import parse_caption, scene_facts

    if len(scenes) != len(texts):
        raise ValueError(f"scenes ({len(scenes)}) and texts ({len(texts)}) must have one entry per item")
    if n_choices not in (2, 4):
        raise ValueError(f"n_choices={n_choices} must be 2 or 4 (the symmetric candidate sets: see build_items)")
    bad = [k for k in kinds if k not in ITEM_KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds {list(kinds)} must be a non-empty subset of {list(ITEM_KINDS)}")
    if n_items < 1:
        raise ValueError(f"n_items={n_items} must be >= 1")
    rng = np.random.default_rng(seed)
    order = iter(rng.permutation(len(scenes)))
    item_kinds = [kinds[j] for j in rng.permutation(np.arange(n_items) % len(kinds))]
    labels = rng.permutation(np.arange(n_items) % n_choices)
    items = []
    for kind, label in zip(item_kinds, labels):
        made = None
        while made is None:
            index = next(order, None)
            if index is None:
                raise ValueError(f"only {len(items)} of n_items={n_items} items could be made from {len(scenes)} "
                                 "scenes (one item per scene): lower n_items or pass more scenes")
            index = int(index)
            scene, text = scenes[index], texts[index]
            if parse_caption(text) != scene_facts(scene, level=LEVEL):
                raise ValueError(f"texts[{index}] does not state the facts of scenes[{index}] at level {LEVEL} "
                                 "(coordinates): pass the captions' texts[5] of the same dataset")
            made = ITEM_KINDS[kind](scene, _sentences(text), rng, n_choices)
        context, endings = made  # endings[0] is the true one
        if contradictions(context + endings[0]) or not all(contradictions(context + e) for e in endings[1:]):
            raise ValueError(f"scene {index}: an ending does not follow the construction; did the caption grammar change?")
        others = [endings[1 + j] for j in rng.permutation(n_choices - 1)]
        endings = others[:label] + [endings[0]] + others[label:]
        items.append({"scene": index, "kind": kind, "context": context, "endings": endings, "label": int(label)})
    return items


def load_items(data: str | Path, *, n_items: int, n_choices: int = 4, seed: int = 0,
               kinds: tuple[str, ...] = tuple(ITEM_KINDS)) -> list[dict]:
    """``build_items`` on a shapes dataset directory (``scenes.jsonl`` + ``captions.jsonl``)."""
    data = Path(data)
    for name in ("scenes.jsonl", "captions.jsonl"):
        if not (data / name).exists():
            raise ValueError(f"data={str(data)!r} has no {name}: pass a shapes dataset dir (prh make-shapes)")
    scenes = [r["scene"] for r in read_jsonl(data / "scenes.jsonl")]
    captions = read_jsonl(data / "captions.jsonl")
    if any(len(r.get("texts", [])) <= LEVEL for r in captions):
        raise ValueError(f"{data / 'captions.jsonl'} lacks texts[{LEVEL}] (coordinates level); rebuild the dataset")
    return build_items(scenes, [r["texts"][LEVEL] for r in captions], n_items=n_items, n_choices=n_choices,
                       seed=seed, kinds=kinds)


# ---------------------------------------------------------------- scoring


def _encode_choices(tokenizer, contexts: list[str], endings: list[list[str]], *, max_length: int | None) -> list[dict]:
    """lm-evaluation-harness style requests: [start] + tok(context) + tok(context + ending)[len(tok(context)):].

    Trailing whitespace of a context moves to the front of its ending (as the harness does);
    the start token (BOS, else EOS) is context only. ``ending_mask`` marks the scored tokens.
    Sequences longer than ``max_length`` lose their oldest context tokens.
    """
    from prh.features import start_token

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
    and padding are ``prh.features``' (``_run_language``): left or right padding give
    the same numbers.

    Parameters
    ----------
    model, tokenizer : a causal LM and its tokenizer (``prh.models.hub.load_language_model``).
    contexts : N non-empty strings.
    endings : N lists of C non-empty strings (HellaSwag: each starts with a space).
    batch_size, device, dtype : as in ``prh.features.bits_per_byte``.

    Returns
    -------
    float64 array N x C.
    """
    import torch

    from prh import features as fx

    contexts = fx._check_texts(contexts)
    endings = [list(e) for e in endings]
    if len(endings) != len(contexts) or len({len(e) for e in endings}) > 1 or not endings[0]:
        raise ValueError("endings must be one non-empty list per context, all of the same length")
    fx._check_texts([e for ends in endings for e in ends])
    cfg = getattr(model, "config", None)
    max_length = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    encodings = _encode_choices(tokenizer, contexts, endings, max_length=max_length)

    def step(batch, dev):
        logits = model(**fx._forward_inputs(model, batch, dev, use_cache=False)).logits
        ids = batch["input_ids"].to(logits.device)
        return -fx.token_nats(logits, ids, batch["ending_mask"].to(logits.device).bool()[:, 1:])

    with torch.inference_mode():
        rows = fx._run_language(model, tokenizer, encodings, batch_size=batch_size, device=device, dtype=dtype,
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


def _by_kind(logprobs, items) -> dict:
    """``mc_scores`` of the items of each kind, with their count."""
    out = {}
    for kind in dict.fromkeys(it["kind"] for it in items):
        idx = [i for i, it in enumerate(items) if it["kind"] == kind]
        out[kind] = {**mc_scores(np.asarray(logprobs)[idx], [items[i]["endings"] for i in idx],
                                 [items[i]["label"] for i in idx]), "n": len(idx)}
    return out


def run_downstream_offline(*, data, names: list[str], models: list[str], out, n_items: int = 512, n_choices: int = 4,
                           seed: int = 0, kinds: tuple[str, ...] = tuple(ITEM_KINDS), batch_size: int = 32,
                           device: str = "auto", dtype: str = "auto", progress: bool = True) -> dict:
    """Score every zoo language model on the shapes-world multiple-choice task; write ``out`` (JSON).

    Returns
    -------
    {"task", "settings", "models": {name: {"acc", "acc_norm", "n_items", "n_params", "by_kind",
    "seconds"}}, "skipped": [{"model", "reason"}]}
    """
    from prh import features as fx
    from prh.models import hub

    if len(names) != len(models):
        raise ValueError(f"names ({len(names)}) and models ({len(models)}) must pair up one to one")
    items = load_items(data, n_items=n_items, n_choices=n_choices, seed=seed, kinds=tuple(kinds))
    contexts = [it["context"] for it in items]
    endings = [it["endings"] for it in items]
    labels = [it["label"] for it in items]
    dev = fx.resolve_device(device)
    dt = fx.resolve_dtype(dtype, dev)
    results, skipped = {}, []
    for name, path in zip(names, models):
        net, tok = hub.load_language_model(path, dtype=dt)
        if not hub.is_causal_lm(net.config):
            skipped.append({"model": name, "reason": f"not a causal LM ({net.config.architectures}): "
                                                      "no next-token probabilities to score endings with"})
        else:
            t0 = time.perf_counter()
            lp = choice_logprobs(net, tok, contexts, endings, batch_size=batch_size, device=dev, dtype=dt,
                                 progress=progress)
            results[name] = {**mc_scores(lp, endings, labels), "n_items": len(items), "n_params": hub.count_params(net),
                             "by_kind": _by_kind(lp, items), "seconds": time.perf_counter() - t0}
        del net
        hub.free_model_memory()
    result = {
        "task": TASK,
        "settings": {"data": str(data), "level": LEVEL, "n_items": len(items), "n_choices": n_choices, "seed": seed,
                     "chance": 1.0 / n_choices, "batch_size": batch_size, "dtype": str(dt).removeprefix("torch."),
                     "kinds": {k: sum(it["kind"] == k for it in items) for k in ITEM_KINDS},
                     "example": items[0]},
        "models": results,
        "skipped": skipped,
    }
    write_json(out, result)
    return result


# ---------------------------------------------------------------- Figure 4


def strongest_vision_model(probes: dict) -> str:
    """The vision model with the highest mean probe accuracy (``models.<m>.mean_accuracy`` of the `prh probe` JSON)."""
    means = {m: r["mean_accuracy"] for m, r in (probes.get("models") or {}).items() if r.get("mean_accuracy") is not None}
    if not means:
        raise ValueError("probes has no models with mean_accuracy: pass the `prh probe` JSON (models.<m>.mean_accuracy)")
    return max(means, key=means.get)


def read_published_scores(path: str | Path) -> dict[str, dict]:
    """Read a CSV of published downstream scores (``workflow/resources/paper_downstream_scores.csv``).

    Columns ``model,hellaswag,gsm8k,hellaswag_setting,gsm8k_setting,source``; lines starting
    with ``#`` are comments; an empty score cell is a missing score (None).

    Returns
    -------
    {model: {"hellaswag": float | None, "gsm8k": float | None, "hellaswag_setting", "gsm8k_setting", "source"}}
    """
    path = Path(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{path} has no header line; expected columns {','.join(CSV_COLUMNS)}")
    reader = csv.DictReader(lines)
    if sorted(reader.fieldnames or []) != sorted(CSV_COLUMNS):
        raise ValueError(f"{path} has columns {reader.fieldnames}; expected exactly {list(CSV_COLUMNS)}")
    rows: dict[str, dict] = {}
    for n, row in enumerate(reader, start=2):
        model = (row["model"] or "").strip()
        if not model or model in rows:
            raise ValueError(f"{path} line {n}: model {model!r} is empty or repeated; one row per model")
        rec = {k: (row[k] or "").strip() for k in CSV_COLUMNS if k != "model"}
        for task in PAPER_TASKS:
            cell = rec[task]
            try:
                rec[task] = float(cell) if cell else None
            except ValueError:
                raise ValueError(f"{path} line {n}: {task}={cell!r} is not a number (leave it empty if unknown)") from None
            if rec[task] is not None and not 0 <= rec[task] <= 100:
                raise ValueError(f"{path} line {n}: {task}={cell} is not a percentage in 0..100")
        rows[model] = rec
    return rows


def figure4(*, downstream: dict, cross_alignment: dict, strongest_vision: str, bpb: dict, n_params: dict) -> dict:
    """Per task: each LM's alignment to the strongest vision model against its score.

    For LM i with alignment a_i = A[i, j*] (j* the strongest vision model's column) and
    score s_i: a least-squares line s = slope a + intercept, Pearson and Spearman r with
    p-values. Colour key: ``lm_rank`` = rank of 1 - bpb among the LMs that appear in any
    panel and have a bpb, 1 = lowest (worst LM), n = highest.

    Parameters
    ----------
    downstream : {model: {task: score | None}}; a None / NaN score leaves the model out of that panel.
    cross_alignment : an alignment JSON, x_names = language models, y_names = vision models.
    strongest_vision : a name in ``cross_alignment["y_names"]``.
    bpb, n_params : {model: value}; missing models get None.

    Returns
    -------
    {"strongest_vision", "tasks": {task: {"points", "fit", "correlations", "missing"}},
     "not_aligned": models with scores but no alignment row}
    """
    x_names, y_names = list(cross_alignment["x_names"]), list(cross_alignment["y_names"])
    if strongest_vision not in y_names:
        raise ValueError(f"strongest_vision={strongest_vision!r} is not a vision model of the alignment; "
                         f"choose one of {y_names}")
    scores = np.asarray(cross_alignment["scores"], dtype=float)
    align = {lm: float(scores[i, y_names.index(strongest_vision)]) for i, lm in enumerate(x_names)}
    tasks = list(dict.fromkeys(t for row in downstream.values() for t in row))  # first-seen order

    def ok(v):
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    shown = [lm for lm in x_names if lm in downstream and any(ok(v) for v in downstream[lm].values())]
    ranked = [lm for lm in shown if bpb.get(lm) is not None]
    order = np.argsort(np.argsort([1.0 - bpb[lm] for lm in ranked], kind="stable"), kind="stable")
    rank = {lm: int(r) + 1 for lm, r in zip(ranked, order)}
    out = {}
    for task in tasks:
        pts = [{"model": lm, "alignment": align[lm], "score": float(downstream[lm][task]),
                "n_params": n_params.get(lm), "lm_score": None if bpb.get(lm) is None else 1.0 - bpb[lm],
                "lm_rank": rank.get(lm)}
               for lm in x_names if lm in downstream and ok(downstream[lm].get(task))]
        x, y = [p["alignment"] for p in pts], [p["score"] for p in pts]
        slope, icpt = np.polyfit(x, y, 1) if len(pts) >= 2 and np.ptp(x) > 0 else (float("nan"), float("nan"))
        out[task] = {"points": pts, "fit": {"slope": float(slope), "intercept": float(icpt)},
                     "correlations": correlations(x, y),
                     "missing": [lm for lm in x_names if not (lm in downstream and ok(downstream[lm].get(task)))]}
    return {"strongest_vision": strongest_vision, "tasks": out, "n_ranked": len(rank),
            "not_aligned": sorted(m for m in downstream if m not in align)}


def _language_table(paths: list[str]) -> tuple[dict, dict]:
    """bpb and n_params by model from zoo language JSONs (``models.<m>``) and/or ``prh lm-score`` JSONs."""
    bpb, n_params = {}, {}
    for path in paths:
        d = read_json(path)
        if "models" in d:
            rows = d["models"]
        elif "model" in d and "bpb" in d:
            rows = {d["model"]: d}
        else:
            raise ValueError(f"{path}: expected a zoo language JSON (models.<m>.bpb) or a `prh lm-score` JSON "
                             "(model, bpb, n_params)")
        for m, r in rows.items():
            if r.get("bpb") is not None:
                bpb[m] = float(r["bpb"])
            if r.get("n_params") is not None:
                n_params[m] = int(r["n_params"])
    return bpb, n_params


def run_figure4(*, cross_alignment: str, scores: str, language: list[str], out_dir: str, probes: str | None = None,
                strongest_vision: str | None = None) -> dict:
    """Figure 4 numbers: writes ``out_dir/downstream.json`` and ``out_dir/metrics.json``; returns the metrics.

    ``scores``: the ``prh downstream-mc`` JSON (tasks ``shapes_mc_acc_norm``, ``shapes_mc_acc``)
    or a CSV of published scores (``read_published_scores``: tasks hellaswag, gsm8k).
    Exactly one of ``probes`` (strongest = best mean probe accuracy) and ``strongest_vision``.
    """
    if (probes is None) == (strongest_vision is None):
        raise ValueError("pass exactly one of probes (the `prh probe` JSON) and strongest_vision (a model name)")
    if probes is not None:
        strongest_vision = strongest_vision_model(read_json(probes))
    bpb, n_params = _language_table(language)
    provenance: dict = {}
    if str(scores).endswith(".csv"):
        rows = read_published_scores(scores)
        downstream = {m: {t: r[t] for t in PAPER_TASKS} for m, r in rows.items()}
        provenance = {m: {k: r[k] for k in ("hellaswag_setting", "gsm8k_setting", "source")} for m, r in rows.items()}
        units = "percent (published)"
    else:
        mc = read_json(scores)
        if "models" not in mc or "task" not in mc:
            raise ValueError(f"scores={scores!r} is neither a CSV nor a `prh downstream-mc` JSON (task, models)")
        downstream = {m: {t: r[k] for t, k in OFFLINE_TASKS.items()} for m, r in mc["models"].items()}
        for m, r in mc["models"].items():
            n_params.setdefault(m, r.get("n_params"))
        provenance = {"task": mc["task"], "settings": mc.get("settings"), "skipped": mc.get("skipped", [])}
        units = "fraction correct"
    cross = read_json(cross_alignment)
    fig = figure4(downstream=downstream, cross_alignment=cross, strongest_vision=strongest_vision, bpb=bpb,
                  n_params=n_params)
    settings = {**cross.get("settings", {}), "cross_alignment": str(cross_alignment), "scores": str(scores),
                "strongest_vision_from": "probes" if probes else "parameter", "units": units}
    write_json(Path(out_dir) / "downstream.json", {"settings": settings, "provenance": provenance, **fig})
    metrics = {task: {**t["correlations"], "slope": t["fit"]["slope"]} for task, t in fig["tasks"].items()}
    write_json(Path(out_dir) / "metrics.json", {"strongest_vision": strongest_vision, "tasks": metrics})
    return metrics


# ---------------------------------------------------------------- CLI


def mc_main(argv: list[str] | None = None) -> None:
    from prh import features as fx

    p = argparse.ArgumentParser(prog="prh downstream-mc", description="shapes-world multiple-choice task (Fig. 4, offline)")
    p.add_argument("--data", required=True, help="shapes dataset dir with scenes.jsonl and captions.jsonl")
    p.add_argument("--models", nargs="+", required=True, help="language model checkpoint dirs")
    p.add_argument("--names", nargs="+", default=None, help="a name per model (default: the dir names)")
    p.add_argument("--out", required=True, help="result JSON, e.g. results/experiments/downstream/shapes_mc.json")
    p.add_argument("--n-items", type=int, default=512)
    p.add_argument("--n-choices", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", nargs="+", default=list(ITEM_KINDS), choices=list(ITEM_KINDS), help="item kinds")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", *fx.DTYPES])
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    names = a.names or [Path(m).name for m in a.models]
    r = run_downstream_offline(data=a.data, names=names, models=a.models, out=a.out, n_items=a.n_items,
                               n_choices=a.n_choices, seed=a.seed, kinds=a.kinds, batch_size=a.batch_size, device=a.device,
                               dtype=a.dtype, progress=not a.no_progress)
    for name, m in r["models"].items():
        kinds = ", ".join(f"{k} {v['acc']:.3f}" for k, v in m["by_kind"].items())
        print(f"{name}: acc {m['acc']:.3f}, acc_norm {m['acc_norm']:.3f} (chance {r['settings']['chance']:.3f}; {kinds})")
    for s in r["skipped"]:
        print(f"{s['model']}: skipped, {s['reason']}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh downstream", description="PRH Fig. 4: alignment vs downstream scores")
    p.add_argument("--cross-alignment", required=True, help="language__vision alignment JSON")
    p.add_argument("--scores", required=True, help="`prh downstream-mc` JSON or a CSV of published scores")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--probes", help="`prh probe` JSON: strongest vision model = best mean probe accuracy")
    which.add_argument("--strongest-vision", help="name of the strongest vision model (paper: vit-giant-dinov2)")
    p.add_argument("--language", nargs="+", required=True,
                   help="zoo language JSON (models.<m>.bpb, n_params) and/or `prh lm-score` JSONs")
    p.add_argument("--out-dir", required=True, help="writes downstream.json and metrics.json there")
    a = p.parse_args(argv)
    print(run_figure4(cross_alignment=a.cross_alignment, scores=a.scores, language=a.language, out_dir=a.out_dir,
                      probes=a.probes, strongest_vision=a.strongest_vision))
