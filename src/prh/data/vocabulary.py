"""The shapes world's vocabulary: what a scene can hold, shared by images, captions and tasks.

``SYNONYMS`` gives every colour and every shape three single-word surface forms, the
canonical name first; captions draw one uniformly per mention (``prh.data.captions``),
while scenes, facts, tasks and question-answer pairs use the canonical name only:

    colour  forms                           shape     forms
    red     red, crimson, scarlet           circle    circle, disc, dot
    orange  orange, amber, tangerine        square    square, box, tile
    yellow  yellow, golden, lemon           triangle  triangle, trigon, delta
    green   green, emerald, jade            diamond   diamond, rhombus, lozenge
    cyan    cyan, turquoise, aqua           hexagon   hexagon, hex, sexangle
    blue    blue, azure, cobalt             star      star, pentagram, starburst
    purple  purple, violet, plum            cross     cross, plus, crux
    pink    pink, rose, orchid
    brown   brown, chocolate, chestnut

Every form is one word (the word-level tokenizer splits on non-word characters), no
form appears twice in the table, and none is a word the grammar writes elsewhere (a
template word, a background, size, region or count word): so a form identifies its
name, and a caption's forms can be read back (``CANONICAL``). Three forms for every
name, so a form's index among its name's forms is uniform whatever the name (the
multiple-choice items rely on it: ``prh.studies.downstream.mc_items``).
"""

from __future__ import annotations

__all__ = ["SHAPES", "COLORS", "BACKGROUNDS", "SIZES", "MAX_OBJECTS", "SYNONYMS", "CANONICAL"]

SHAPES = ("circle", "square", "triangle", "diamond", "hexagon", "star", "cross")


COLORS = {  # name -> sRGB, chosen to be told apart on every background
    "red": (220, 40, 40),
    "orange": (245, 140, 20),
    "yellow": (240, 220, 40),
    "green": (40, 170, 60),
    "cyan": (40, 200, 220),
    "blue": (40, 80, 225),
    "purple": (150, 50, 170),
    "pink": (245, 130, 200),
    "brown": (135, 85, 40),
}


BACKGROUNDS = {"black": (15, 15, 15), "grey": (128, 128, 128), "white": (245, 245, 245), "navy": (20, 30, 80)}


SIZES = ("small", "medium", "large")


MAX_OBJECTS = 4


SYNONYMS = {  # canonical name -> its surface forms, canonical first (table in the module docstring)
    "red": ("red", "crimson", "scarlet"),
    "orange": ("orange", "amber", "tangerine"),
    "yellow": ("yellow", "golden", "lemon"),
    "green": ("green", "emerald", "jade"),
    "cyan": ("cyan", "turquoise", "aqua"),
    "blue": ("blue", "azure", "cobalt"),
    "purple": ("purple", "violet", "plum"),
    "pink": ("pink", "rose", "orchid"),
    "brown": ("brown", "chocolate", "chestnut"),
    "circle": ("circle", "disc", "dot"),
    "square": ("square", "box", "tile"),
    "triangle": ("triangle", "trigon", "delta"),
    "diamond": ("diamond", "rhombus", "lozenge"),
    "hexagon": ("hexagon", "hex", "sexangle"),
    "star": ("star", "pentagram", "starburst"),
    "cross": ("cross", "plus", "crux"),
}


CANONICAL = {form: name for name, forms in SYNONYMS.items() for form in forms}  # surface form -> canonical name
