"""A HellaSwag-style multiple choice built from the shapes world (PRH Figure 4, offline).

Each item is the start of a coordinates-level caption (object list, background, each
object's size, grid region and centre, relations so far) and C endings of one template
that differ in one slot: which objects a relation names (``entity``), left/right x
above/below (``relation``), or the centre that follows a stated grid region (``region``).
The true ending is the caption's own continuation; the others contradict the context
(``contradictions`` checks it), and the set of endings is the same whichever one is true,
so an LM that ignores the context scores exactly 1/C. Captions write colours and shapes
in drawn synonyms (``prh.data.vocabulary.SYNONYMS``); endings keep the caption's forms, and
an entity item's replacement takes the replaced word's synonym index.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from prh.io import read_jsonl
from prh.errors import UsageError

__all__ = ["TASK", "LEVEL", "ITEM_KINDS", "build_items", "load_items", "contradictions"]

TASK = ("HellaSwag-style caption completion in the shapes world: given the start of a coordinates-level "
        "caption (object list, background, each object's size, grid region and centre, relations so far), "
        "choose the caption's own continuation among endings of one template that differ in one slot and "
        "contradict the context: which objects a relation names (entity), left/right x above/below "
        "(relation), or the centre that follows a stated grid region (region).")


LEVEL = 5  # captions at the "coordinates" density: the context states every object's centre


def _templates(kind: str):
    from prh.data.captions import CONSTRUCTIONS, compile_template

    return [(t, compile_template(t)) for t in CONSTRUCTIONS[kind]]


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
    """A relation sentence; one name slot (subject or other) takes n_choices names, one of them in the scene.

    The replaced word keeps its synonym index (its k-th form stands for another name's k-th
    form); the other word of the name keeps its form.
    """
    from prh.data.captions import canonical_text, object_name
    from prh.data.vocabulary import COLORS, SHAPES, SYNONYMS

    pairs = [(k, *m) for k, s in enumerate(sentences) if (m := _match(s, _templates("pair")))]
    if not pairs:
        return None
    k, template, g = pairs[int(rng.integers(len(pairs)))]
    slot = ("obj", "other")[int(rng.integers(2))]
    color_form, shape_form = g[slot].split(" ")
    color, shape = canonical_text(g[slot])[0].split(" ")
    names = {object_name(o) for o in scene["objects"]}
    if rng.integers(2):
        j = SYNONYMS[color].index(color_form)
        options = [f"{SYNONYMS[c][j]} {shape_form}" for c in COLORS
                   if f"{c} {shape}" not in names and len(SYNONYMS[c]) > j]
    else:
        j = SYNONYMS[shape].index(shape_form)
        options = [f"{color_form} {SYNONYMS[s][j]}" for s in SHAPES
                   if f"{color} {s}" not in names and len(SYNONYMS[s]) > j]
    others = [options[j] for j in rng.choice(len(options), size=n_choices - 1, replace=False)]
    endings = [" " + _render(template, **{**g, slot: n}) for n in [g[slot], *others]]
    return " ".join(sentences[:k]), endings


def _relation_item(scene, sentences, rng, n_choices):
    """A relation sentence; (left|right) x (above|below): the full 2 x 2 grid (4 choices) or one flipped axis (2)."""
    from prh.data.captions import canonical_text, object_name

    pos = {object_name(o): (round(100 * o["x"]), round(100 * o["y"])) for o in scene["objects"]}
    usable = []
    for k, s in enumerate(sentences):
        m = _match(s, _templates("pair"))
        if m:
            a, b = (pos[canonical_text(m[1][slot])[0]] for slot in ("obj", "other"))
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
    from prh.data.captions import canonical_text, object_name

    corner = [object_name(o) for o in scene["objects"]
              if all(10 <= p <= 32 or 68 <= p <= 90 for p in (round(100 * o["x"]), round(100 * o["y"])))]
    usable = [(k, *m) for k, s in enumerate(sentences)
              if (m := _match(s, _templates("coord"))) and canonical_text(m[1]["obj"])[0] in corner]
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
      names of no object in the scene, hence outside the context's object list. The
      replacement is written in the replaced word's synonym index (the caption's
      "crimson" = red's 2nd form becomes e.g. "amber" = orange's 2nd form; every name has
      three forms, drawn uniformly, so the index says nothing about which name is true).
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
            raise UsageError(f"data={str(data)!r} has no {name}: pass a shapes dataset dir (prh make-shapes)")
    scenes = [r["scene"] for r in read_jsonl(data / "scenes.jsonl")]
    captions = read_jsonl(data / "captions.jsonl")
    if any(len(r.get("texts", [])) <= LEVEL for r in captions):
        raise ValueError(f"{data / 'captions.jsonl'} lacks texts[{LEVEL}] (coordinates level); rebuild the dataset")
    return build_items(scenes, [r["texts"][LEVEL] for r in captions], n_items=n_items, n_choices=n_choices,
                       seed=seed, kinds=kinds)
