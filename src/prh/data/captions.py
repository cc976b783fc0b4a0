"""Captions of shapes-world scenes at six densities, and their inverse (PRH section 6, appendix E).

The PRH's figure 9 shows that denser captions align better with vision. Here the
density is exact: level k states a set of facts about the scene, and each level's
facts contain every fact of the level below (strictly nested information):

    0 one_object   colour and shape of the largest object ("A red circle.")
    1 objects      + how many objects, and each one's colour and shape
    2 sizes        + the background colour and each object's size
    3 regions      + each object's cell in a 3 x 3 grid (upper left ... lower right)
    4 relations    + for every pair: left/right of and above/below (``left_of``, ``above``:
                     a tie on one axis, possible on the jittered grid, is broken by the other)
    5 coordinates  + each object's centre in percent of the image side

A caption is a sequence of sentences, one per construction (the object list, the
background, one per object, one per pair); each sentence uses one of at least three
paraphrase templates, drawn from ``rng``. Objects are named by colour and shape,
unique within a scene (``prh.data.shapes``), so a caption is unambiguous. Every
mention of a colour or a shape (object lists, sentences, relations, level 0 too)
is written in one of its surface forms (``prh.data.vocabulary.SYNONYMS``: "crimson
disc" for the red circle), drawn uniformly and independently per mention; "a"/"an"
follows the drawn form ("an amber circle"). Facts, ``object_name`` and every other
output stay canonical. ``parse_caption`` inverts the grammar (each template compiled
to a regex, every form read back to its name), so a test can check that a caption's
text states exactly ``scene_facts(scene, level)``.

Draw order, per sentence (slot of ``caption_options``): the subject coin (pair
sentences only), the template, then one form per colour or shape word of the
sentence, left to right (``rng.integers(len(forms))`` each). ``canonical_text`` and
``apply_forms`` split a sentence into its canonical sentence and its forms and back,
so ``prh.data.world_prob`` can score the choices exactly.

    >>> caption(scene, level=5, rng=np.random.default_rng(0))
"""

from __future__ import annotations

import re
from itertools import combinations

import numpy as np

from prh.data.vocabulary import BACKGROUNDS, CANONICAL, COLORS, SHAPES, SYNONYMS

LEVELS = ("one_object", "objects", "sizes", "regions", "relations", "coordinates")
LEVEL_DESCRIPTIONS = (
    "the largest object",
    "+ every object",
    "+ sizes, background",
    "+ grid regions",
    "+ pairwise relations",
    "+ coordinates",
)
COUNT_WORDS = ("one", "two", "three", "four")
SIZE_WORDS = {"small": "small", "medium": "medium-sized", "large": "large"}
REGIONS = (("upper left", "upper middle", "upper right"),  # [row][column] of the 3 x 3 grid
           ("middle left", "centre", "middle right"),
           ("lower left", "lower middle", "lower right"))

# Templates per construction, lower-case first letter (the sentence is capitalised).
T_ONE = ("{a_obj}.", "there is {a_obj}.", "a picture of {a_obj}.", "an image with {a_obj} in it.")
T_LIST = ("{count} {objects}: {list}.", "there {are} {count} {objects}: {list}.",
          "the image shows {count} {shapes}: {list}.", "we see {count} {objects}: {list}.")
T_BACKGROUND = ("the background is {bg}.", "everything is on a {bg} background.", "the scene has a {bg} background.")
T_SIZE = ("the {obj} is {size}.", "the {obj} appears {size}.", "the {obj} is drawn {size}.")
T_REGION = ("the {obj} is {size} and sits in the {region}.", "in the {region} is the {size} {obj}.",
            "the {size} {obj} lies in the {region}.", "the {obj}, {size}, is located in the {region}.")
T_COORD = ("the {obj} is {size}, sits in the {region} and is centred at ({x}, {y}).",
           "the {size} {obj} lies in the {region}, {x} percent across and {y} percent down.",
           "in the {region}, at x {x} and y {y}, is the {size} {obj}.")
T_PAIR = ("the {obj} is {v} and to the {h} of the {other}.", "the {obj} is to the {h} of and {v} the {other}.",
          "the {obj} sits {v} the {other}, to its {h}.")
CONSTRUCTIONS = {"one": T_ONE, "list": T_LIST, "background": T_BACKGROUND, "size": T_SIZE, "region": T_REGION,
                 "coord": T_COORD, "pair": T_PAIR}


def object_name(obj: dict) -> str:
    """The name that identifies an object in its scene: ``"red circle"``."""
    return f"{obj['color']} {obj['shape']}"


def region(obj: dict) -> str:
    """The 3 x 3 grid cell of the object's centre (thirds of the image side)."""
    row, col = (min(int(v * 3), 2) for v in (obj["y"], obj["x"]))
    return REGIONS[row][col]


def left_of(a: dict, b: dict) -> bool:
    """Whether object a is left of b: x_a < x_b, equal x (same grid column) decided by y_a < y_b."""
    return (a["x"], a["y"]) < (b["x"], b["y"])


def above(a: dict, b: dict) -> bool:
    """Whether object a is above b (y grows downwards): y_a < y_b, equal y decided by x_a < x_b."""
    return (a["y"], a["x"]) < (b["y"], b["x"])


def percent(v: float) -> int:
    return int(round(100 * v))


def scene_facts(scene: dict, *, level: int) -> frozenset:
    """The facts a level-``level`` caption states, as tuples (see the module docstring).

    ``("object", name)``, ``("count", n)``, ``("background", bg)``, ``("size", name, size)``,
    ``("region", name, cell)``, ``("left_of", a, b)``, ``("above", a, b)``, ``("position", name, x%, y%)``.
    """
    _check_level(level)
    objs = scene["objects"]
    facts = {("object", object_name(objs[0]))}
    if level >= 1:
        facts |= {("object", object_name(o)) for o in objs} | {("count", len(objs))}
    if level >= 2:
        facts |= {("background", scene["background"])} | {("size", object_name(o), o["size"]) for o in objs}
    if level >= 3:
        facts |= {("region", object_name(o), region(o)) for o in objs}
    if level >= 4:
        for a, b in combinations(objs, 2):
            left, right = (a, b) if left_of(a, b) else (b, a)
            top, bottom = (a, b) if above(a, b) else (b, a)
            facts |= {("left_of", object_name(left), object_name(right)), ("above", object_name(top), object_name(bottom))}
    if level >= 5:
        facts |= {("position", object_name(o), percent(o["x"]), percent(o["y"])) for o in objs}
    return frozenset(facts)


def _check_level(level: int) -> None:
    if level not in range(len(LEVELS)):
        raise ValueError(f"level must be an integer in 0..{len(LEVELS) - 1} ({', '.join(LEVELS)}), got {level!r}")


def _article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def _render(templates: tuple[str, ...], **values) -> tuple[str, ...]:
    """The sentence under every template of a construction, capitalised as in a caption."""
    return tuple((s := t.format(**values))[0].upper() + s[1:] for t in templates)


def caption_options(scene: dict, *, level: int) -> list[tuple[tuple[str, ...], ...]]:
    """Every sentence a level-``level`` caption of ``scene`` can hold, slot by slot, in canonical names.

    One slot per sentence, in caption order; a slot is a tuple of subject variants (two
    for a pair sentence, (a, b) then (b, a), each drawn with probability 1/2; one
    otherwise), each variant the tuple of its sentence under every template of the
    construction (each drawn with probability 1 / len). ``caption`` picks one sentence
    per slot, so P(sentence in slot) = Σ_v [#templates of v giving it] / (len(v) · #variants),
    then writes each colour or shape word in a form drawn uniformly from its synonyms
    (``canonical_text`` of the written sentence gives the picked one back).
    """
    _check_level(level)
    objs = scene["objects"]
    n = len(objs)
    if level == 0:
        slots = [(_render(T_ONE, a_obj=_article(object_name(objs[0]))),)]
    else:
        names = [_article(object_name(o)) for o in objs]
        listed = names[0] if n == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        slots = [(_render(T_LIST, count=COUNT_WORDS[n - 1], list=listed, objects="object" + "s" * (n > 1),
                          shapes="shape" + "s" * (n > 1), are="are" if n > 1 else "is"),)]
    if level >= 2:
        slots.append((_render(T_BACKGROUND, bg=scene["background"]),))
        templates = T_SIZE if level == 2 else T_REGION if level < 5 else T_COORD
        slots += [(_render(templates, obj=object_name(o), size=SIZE_WORDS[o["size"]], region=region(o),
                           x=percent(o["x"]), y=percent(o["y"])),) for o in objs]
    if level >= 4:  # either object may be the subject: more paraphrases, same facts
        slots += [tuple(_render(T_PAIR, obj=object_name(a), other=object_name(b), h="left" if left_of(a, b) else "right",
                                v="above" if above(a, b) else "below") for a, b in ((p, q), (q, p)))
                  for p, q in combinations(objs, 2)]
    return slots


def _alt(words) -> str:
    return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + ")"


# a colour or shape word, with the article before it if there is one ("a", "an", "A", "An")
_MENTION = re.compile(rf"\b(?:([Aa])n? )?\b({_alt(CANONICAL)})\b")


def _substitute(text: str, pick) -> str:
    """``text`` with every colour or shape word w replaced by ``pick(w)``, left to right; articles follow."""
    def one(m: re.Match) -> str:
        form = pick(m.group(2))
        return form if m.group(1) is None else f"{m.group(1)}{'n' * (form[0] in 'aeiou')} {form}"
    return _MENTION.sub(one, text)


def canonical_text(text: str) -> tuple[str, tuple[str, ...]]:
    """(``text`` with every colour and shape form replaced by its canonical name, the forms it used).

    The forms are listed left to right; "a"/"an" before a replaced word follows the
    canonical name. ``canonical_text("An amber disc.") == ("An orange circle.", ("amber", "disc"))``.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    forms: list[str] = []
    return _substitute(text, lambda w: forms.append(w) or CANONICAL[w]), tuple(forms)


def apply_forms(text: str, forms) -> str:
    """``text`` with its k-th colour or shape word written as ``forms[k]`` (the inverse of ``canonical_text``).

    Raises ValueError unless ``forms`` has one entry per colour or shape word of ``text``, each a
    form of that word's name (``SYNONYMS``).
    """
    forms = tuple(forms)
    words = canonical_text(text)[1]
    if len(forms) != len(words) or any(CANONICAL.get(f) != CANONICAL[w] for f, w in zip(forms, words)):
        raise ValueError(f"forms {forms} must give one surface form (SYNONYMS) of each of the names {words} of the text")
    it = iter(forms)
    return _substitute(text, lambda w: next(it))


def caption(scene: dict, *, level: int, rng: np.random.Generator | int) -> str:
    """A caption of ``scene`` at density ``level``, templates and word forms drawn from ``rng`` (a Generator or a seed).

    Per slot of ``caption_options``: the subject variant (pair sentences: the swapped one
    when ``rng.random() < 0.5``), then the template, ``rng.integers(len(templates))``, then
    per colour or shape word of the sentence, left to right, its form
    ``SYNONYMS[name][rng.integers(len(SYNONYMS[name]))]``.
    """
    rng = np.random.default_rng(rng)
    sentences = []
    for slot in caption_options(scene, level=level):
        variant = slot[1] if len(slot) == 2 and rng.random() < 0.5 else slot[0]
        sentence = variant[int(rng.integers(len(variant)))]
        sentences.append(_substitute(sentence, lambda w: SYNONYMS[w][int(rng.integers(len(SYNONYMS[w])))]))
    return " ".join(sentences)


def captions(scene: dict, *, seed: int) -> list[str]:
    """One caption per level, sparsest first, level k's templates drawn from ``default_rng([seed, k])``."""
    return [caption(scene, level=lv, rng=np.random.default_rng([seed, lv])) for lv in range(len(LEVELS))]


_NAME = f"{_alt(f for c in COLORS for f in SYNONYMS[c])} {_alt(f for s in SHAPES for f in SYNONYMS[s])}"  # any forms
_SLOTS = {
    "a_obj": f"an? (?P<obj>{_NAME})", "obj": f"(?P<obj>{_NAME})", "other": f"(?P<other>{_NAME})",
    "count": f"(?P<count>{_alt(COUNT_WORDS)})", "objects": "objects?", "shapes": "shapes?", "are": "(?:is|are)",
    "list": "(?P<list>.+)", "bg": f"(?P<bg>{_alt(BACKGROUNDS)})", "size": f"(?P<size>{_alt(SIZE_WORDS.values())})",
    "region": f"(?P<region>{_alt(sum(REGIONS, ()))})", "x": r"(?P<x>\d+)", "y": r"(?P<y>\d+)",
    "h": "(?P<h>left|right)", "v": "(?P<v>above|below)",
}


def compile_template(template: str) -> re.Pattern:
    parts = re.split(r"\{(\w+)\}", template)  # literal, slot, literal, slot, ...
    return re.compile("".join(re.escape(p) if i % 2 == 0 else _SLOTS[p] for i, p in enumerate(parts)))


_PATTERNS = [(kind, compile_template(t)) for kind, templates in CONSTRUCTIONS.items() for t in templates]
_SIZE_OF_WORD = {w: s for s, w in SIZE_WORDS.items()}


def _sentence_facts(kind: str, m: re.Match) -> set:
    g = m.groupdict()
    if kind == "one":
        return {("object", g["obj"])}
    if kind == "list":
        items = re.split(r", | and ", g["list"])
        names = [re.fullmatch(_SLOTS["a_obj"], item) for item in items]
        if None in names or len(items) != COUNT_WORDS.index(g["count"]) + 1:
            raise ValueError(f"the object list {g['list']!r} does not name {g['count']} objects")
        return {("object", nm["obj"]) for nm in names} | {("count", len(items))}
    if kind == "background":
        return {("background", g["bg"])}
    if kind == "pair":
        a, b = g["obj"], g["other"]
        return {("left_of", a, b) if g["h"] == "left" else ("left_of", b, a),
                ("above", a, b) if g["v"] == "above" else ("above", b, a)}
    facts = {("size", g["obj"], _SIZE_OF_WORD[g["size"]])}
    if kind in ("region", "coord"):
        facts.add(("region", g["obj"], g["region"]))
    if kind == "coord":
        facts.add(("position", g["obj"], int(g["x"]), int(g["y"])))
    return facts


def parse_caption(text: str) -> frozenset:
    """The facts a caption states (``scene_facts``' format), read back from its text.

    Every surface form of a colour or shape is read as its canonical name
    (``canonical_text``). Raises ValueError on a sentence that no template produces.
    """
    facts: set = set()
    for sentence in re.split(r"(?<=\.)\s+", text.strip()):
        sentence = sentence[:1].lower() + sentence[1:]
        canonical = canonical_text(sentence)[0]
        for kind, pattern in _PATTERNS:
            m = pattern.fullmatch(canonical)
            if m:
                facts |= _sentence_facts(kind, m)
                break
        else:
            raise ValueError(f"text: the sentence {sentence!r} matches no caption template")
    return frozenset(facts)
