"""Exact probabilities of the shapes world's generator: scenes, densest captions, the entropy floor.

The generator (``prh.data.shapes.sample_scene``) is a finite discrete model, so the
probability of a scene, and of a level-5 (coordinates) caption, is computable
exactly. A scene S with n objects, background b and, per object k, a (colour, shape)
pair c_k, a size, a grid cell and a jitter (dx_k, dy_k)::

    p(S) = p(n) Σ_t w_t p_bg[t, b] Σ_{σ ∈ orders of the n objects} Π_k q_t(c_σk) / (1 - Σ_{j<k} q_t(c_σj))
           · |SIZES|^-n · (|cells| - n)! / |cells|! · (2J + 1)^-2n

with q_t(colour, shape) = p_color[t, colour] p_shape[t, shape]: the latent type is
summed over, and so are the n! orders in which the object set could have been drawn
(the cells, sizes and jitters cost the same in every order). A level-5 caption
states every fact of its scene (``prh.data.captions``), so its text determines the
scene, and::

    -log2 p(text) = -log2 p(S) - Σ_slots log2 P(sentence in slot | S)
    P(sentence in slot | S) = P(canonical sentence in slot | S) · Π_{mentions m} 1 / |forms(m)|

with the canonical sentences' probabilities from ``caption_options`` (template and
subject-swap choices) and one factor per colour or shape word, whose form is drawn
uniformly from its synonyms (``prh.data.vocabulary.SYNONYMS``). Forms are unique
words, so ``captions.canonical_text`` reads every choice back from the text. Summed
over captions and divided by their UTF-8 bytes this is the entropy
floor in bits per byte that no language model of the captions can beat on average.

    >>> caption_bits(text, world=params["world"])      # bits of one level-5 caption
    >>> entropy_floor_bpb(texts, world=params["world"])
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from itertools import permutations

import numpy as np

from prh.data.captions import apply_forms, canonical_text, caption_options, parse_caption, percent
from prh.data.shapes import CELL_PERCENTS, type_tables, world_config
from prh.data.vocabulary import BACKGROUNDS, CANONICAL, COLORS, SHAPES, SIZES, SYNONYMS

__all__ = ["WorldModel", "world_model", "scene_log2prob", "caption_bits", "entropy_floor_bpb"]


@dataclass(frozen=True, eq=False)
class WorldModel:
    """The generator's discrete tables (``world_model`` builds the default world's).

    type_weights: T, the latent types' probabilities. p_bg T x |backgrounds|, p_color
    T x |colors|, p_shape T x |shapes|: rows summing to 1, columns in the order of the
    name tuples. n is uniform on min_objects..max_objects, sizes uniform, cells (centres
    (x, y) in whole percents) drawn without replacement, jitter J uniform per axis.
    """

    type_weights: np.ndarray
    backgrounds: tuple[str, ...]
    p_bg: np.ndarray
    colors: tuple[str, ...]
    p_color: np.ndarray
    shapes: tuple[str, ...]
    p_shape: np.ndarray
    min_objects: int
    max_objects: int
    sizes: tuple[str, ...]
    cells: tuple[tuple[int, int], ...]
    jitter: int

    def __post_init__(self):
        t = len(self.type_weights)
        for name, table, vocab in (("p_bg", self.p_bg, self.backgrounds), ("p_color", self.p_color, self.colors),
                                   ("p_shape", self.p_shape, self.shapes), ("type_weights", self.type_weights, [0] * t)):
            table = np.asarray(table, dtype=float)
            if table.shape != ((t, len(vocab)) if table.ndim == 2 else (t,)) or table.min() < 0 \
                    or not np.allclose(table.sum(-1), 1.0, atol=1e-12):
                raise ValueError(f"WorldModel.{name} must be non-negative rows summing to 1, one per type and one "
                                 f"column per name ({t} x {len(vocab)}), got shape {table.shape}")
        if not 1 <= self.min_objects <= self.max_objects <= min(len(self.cells), len(self.colors) * len(self.shapes)):
            raise ValueError("WorldModel: need 1 <= min_objects <= max_objects <= the number of cells and of pairs")
        far = all(max(abs(a[0] - b[0]), abs(a[1] - b[1])) > 2 * self.jitter
                  for i, a in enumerate(self.cells) for b in self.cells[i + 1:])
        if self.jitter < 0 or not far:
            raise ValueError(f"WorldModel: cells must lie more than 2 * jitter = {2 * self.jitter} percent apart "
                             "on some axis (so a centre names its cell), and jitter must be >= 0")


def world_model(world: dict | None = None) -> WorldModel:
    """The ``WorldModel`` of a params.yaml world block (missing keys: the schema's defaults)."""
    w = world_config(world)
    key = tuple(w[k] for k in ("scene_types", "type_concentration", "type_seed", "min_objects", "max_objects",
                               "position_jitter"))
    return _cached_model(key)


@functools.lru_cache(maxsize=8)
def _cached_model(key: tuple) -> WorldModel:
    scene_types, concentration, seed, lo, hi, jitter = key
    tables = type_tables(scene_types=scene_types, type_concentration=concentration, type_seed=seed)
    return WorldModel(type_weights=np.full(scene_types, 1.0 / scene_types), backgrounds=tuple(BACKGROUNDS),
                      p_bg=tables["p_bg"], colors=tuple(COLORS), p_color=tables["p_color"], shapes=tuple(SHAPES),
                      p_shape=tables["p_shape"], min_objects=lo, max_objects=hi, sizes=tuple(SIZES),
                      cells=tuple((x, y) for y in CELL_PERCENTS for x in CELL_PERCENTS), jitter=jitter)


def _index(names: tuple[str, ...], value, what: str) -> int:
    if value not in names:
        raise ValueError(f"scene: {what} {value!r} is not in the world model's {what}s {names}")
    return names.index(value)


def scene_log2prob(scene: dict, model: WorldModel) -> float:
    """log2 p(scene) under ``model`` (the formula in the module docstring); -inf off the support.

    The scene's objects are read as a set (their list order is ignored); ``scene["type"]``,
    if present, is ignored too: the latent type is summed over. Off the support (a count,
    pair or cell twice, a centre off the jittered grid or not a whole percent): -inf.
    Raises ValueError on a background, colour, shape or size the model does not name.
    """
    objs = scene["objects"]
    n = len(objs)
    b = _index(model.backgrounds, scene["background"], "background")
    pairs, cells = [], []
    for o in objs:
        pairs.append((_index(model.colors, o["color"], "color"), _index(model.shapes, o["shape"], "shape")))
        _index(model.sizes, o["size"], "size")
        xy = (percent(o["x"]), percent(o["y"]))
        if any(abs(100 * o[k] - p) > 1e-6 for k, p in zip("xy", xy)):
            return -math.inf
        cell = [i for i, c in enumerate(model.cells) if abs(xy[0] - c[0]) <= model.jitter and abs(xy[1] - c[1]) <= model.jitter]
        cells += cell[:1] or [None]
    if not model.min_objects <= n <= model.max_objects or None in cells or len(set(cells)) < n or len(set(pairs)) < n:
        return -math.inf
    q = np.asarray(model.p_color)[:, :, None] * np.asarray(model.p_shape)[:, None, :]  # T x colours x shapes
    mask = np.ones(q.shape[1:], dtype=bool)
    for c, s in pairs:
        mask[c, s] = False
    rest = q[:, mask].sum(1)  # each type's mass on the pairs the scene does not hold
    held = np.stack([q[:, c, s] for c, s in pairs], axis=1)  # T x n
    orders = 0.0
    for order in permutations(range(n)):
        p = 1.0
        for i, k in enumerate(order):  # the unused pairs' mass, summed afresh (no cancellation)
            left = rest + held[:, list(order[i:])].sum(1)
            p = p * np.divide(held[:, k], left, out=np.zeros_like(left), where=left > 0)
        orders = orders + p
    mix = float(np.sum(np.asarray(model.type_weights) * np.asarray(model.p_bg)[:, b] * orders))
    if mix <= 0:
        return -math.inf
    m = len(model.cells)
    return (math.log2(mix) - math.log2(model.max_objects - model.min_objects + 1) - n * math.log2(len(model.sizes))
            - sum(math.log2(m - k) for k in range(n)) - 2 * n * math.log2(2 * model.jitter + 1))


def _scene_of_facts(facts: frozenset) -> dict | None:
    """The scene a level-5 caption's facts describe, objects in the generator's order; None if incomplete."""
    by_kind: dict[str, list] = {}
    for f in facts:
        by_kind.setdefault(f[0], []).append(f[1:])
    size, pos = dict(by_kind.get("size", [])), {f[0]: f[1:] for f in by_kind.get("position", [])}
    names = sorted(f[0] for f in by_kind.get("object", []))
    if len(by_kind.get("background", [])) != 1 or any(nm not in size or nm not in pos for nm in names):
        return None
    objs = [{"shape": nm.split(" ")[1], "color": nm.split(" ")[0], "size": size[nm], "x": pos[nm][0] / 100,
             "y": pos[nm][1] / 100} for nm in names]
    objs.sort(key=lambda o: (-SIZES.index(o["size"]), o["x"], o["y"]))
    return {"background": by_kind["background"][0][0], "objects": objs}


def _model(world) -> WorldModel:
    return world if isinstance(world, WorldModel) else world_model(world)


def caption_bits(text: str, *, world: dict | WorldModel | None = None) -> float:
    """-log2 p(text) under the generator, exactly, for a level-5 (coordinates) caption.

    = -log2 p(S) - Σ_slots log2 P(sentence | S), S the scene the text states (module
    docstring); the slot probabilities come from the template tuples via ``caption_options``,
    times 1 / |forms| per colour or shape word (``canonical_text`` reads the forms back).
    ``world``: a params.yaml world block (None: defaults) or a ``WorldModel``. A text
    that parses but that the generator never writes (facts that contradict each other,
    sentences out of order, a scene off the support) has probability 0: returns inf.
    Raises ValueError on a sentence no template produces, or a caption of another level.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a caption string, got {type(text).__name__}")
    facts = parse_caption(text)
    if not any(f[0] == "position" for f in facts):
        raise ValueError("text: caption_bits needs a level-5 (coordinates) caption, the densest, which states every "
                         f"object's centre; got {text[:80]!r}")
    scene = _scene_of_facts(facts)
    if scene is None:
        return math.inf
    slots = caption_options(scene, level=5)  # the text must be one of these sentences, slot by slot
    sentences = re.split(r"(?<=\.) ", text)
    if len(sentences) != len(slots):
        return math.inf
    bits = -scene_log2prob(scene, _model(world))
    for sentence, slot in zip(sentences, slots):
        canonical, forms = canonical_text(sentence)
        if apply_forms(canonical, forms) != sentence:  # an article the generator does not write
            return math.inf
        p = sum(variant.count(canonical) / len(variant) for variant in slot) / len(slot)
        p /= math.prod(len(SYNONYMS[CANONICAL[f]]) for f in forms)
        if p == 0:
            return math.inf
        bits -= math.log2(p)
    return bits


def entropy_floor_bpb(texts: list[str], *, world: dict | WorldModel | None = None) -> float:
    """Σ caption_bits(text) / Σ UTF-8 bytes of the texts: the generator's bits per byte on them.

    Averaged over captions drawn from the generator, the numerator estimates the
    captions' entropy, the least mean code length any model can reach: a floor for an
    LM's bits per byte on the same texts. ``texts``: level-5 captions (``caption_bits``).
    """
    if isinstance(texts, str) or not texts:
        raise ValueError("texts must be a non-empty list of level-5 caption strings")
    model = _model(world)
    return sum(caption_bits(t, world=model) for t in texts) / sum(len(t.encode("utf-8")) for t in texts)
