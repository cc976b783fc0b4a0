"""Question-answer pairs about a shapes-world scene, appended to the language zoo's training text.

A caption alone lets a language model score well by knowing the grammar;
questions whose answers were stated earlier in the same text make later tokens depend
on earlier content, so a model is rewarded for reading its context. Each pair is one
of seven kinds, asked only where the answer is unique in the scene:

    count       "Q: how many objects are there? A: three."
    background  "Q: what colour is the background? A: grey."
    colour      "Q: what colour is the star? A: red."            (the scene's only star)
    shape       "Q: what shape is the red object? A: star."      (the scene's only red object)
    region      "Q: where is the red star? A: upper left."
    position    "Q: where exactly is the red star? A: upper left, at (18, 11)."
    left/right  "Q: is the red star left or right of the blue cross? A: left."  (every pair, in scene order)

The last two (added with the 3000-step schedule, `a64827c`) ask the facts only the densest captions state,
the centre in percent and the left/right order, in every density's text: the position
answer puts a grid region next to the centre it implies, a dependency the captions
write only at the coordinates level (1 text in 6). Chosen on competence alone: with
them gpt2_l's multiple-choice region items went from 0.29 / 0.81 (seeds 1 / 0) to
1.00 / 1.00 after 3000 steps (``benchmarks/README.md``).

    >>> qa_text(scene, rng=np.random.default_rng(0), n_pairs=3)
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from prh.data.captions import COUNT_WORDS, left_of, object_name, percent, region

__all__ = ["qa_pairs", "qa_text"]


def qa_pairs(scene: dict) -> list[tuple[str, str]]:
    """Every (question, answer) the scene supports, in a fixed order (kinds as in the module docstring)."""
    objs = scene["objects"]
    pairs = [("how many objects are there?", COUNT_WORDS[len(objs) - 1]),
             ("what colour is the background?", scene["background"])]
    shapes = [o["shape"] for o in objs]
    colors = [o["color"] for o in objs]
    for o in objs:
        if shapes.count(o["shape"]) == 1:
            pairs.append((f"what colour is the {o['shape']}?", o["color"]))
        if colors.count(o["color"]) == 1:
            pairs.append((f"what shape is the {o['color']} object?", o["shape"]))
        pairs.append((f"where is the {object_name(o)}?", region(o)))
    pairs += [(f"where exactly is the {object_name(o)}?", f"{region(o)}, at ({percent(o['x'])}, {percent(o['y'])})")
              for o in objs]
    pairs += [(f"is the {object_name(a)} left or right of the {object_name(b)}?", "left" if left_of(a, b) else "right")
              for a, b in combinations(objs, 2)]
    return pairs


def qa_text(scene: dict, *, rng: np.random.Generator | int, n_pairs: int = 3) -> str:
    """``n_pairs`` distinct question-answer pairs drawn from ``qa_pairs(scene)`` (fewer if it has fewer)."""
    if n_pairs < 0:
        raise ValueError(f"n_pairs={n_pairs} must be >= 0")
    rng = np.random.default_rng(rng)
    pairs = qa_pairs(scene)
    chosen = rng.choice(len(pairs), size=min(n_pairs, len(pairs)), replace=False)
    return " ".join(f"Q: {pairs[i][0]} A: {pairs[i][1]}." for i in chosen)
