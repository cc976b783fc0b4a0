"""Relational competence of a causal LM, measured on held-out scenes, and a gate that tests left-most-ness.

The audit of 2026-11-27: the zoo's competence measure (bits per byte) is blind to relations, and the world
gate's rationale for "shape of the left-most object" holds just as well for any object (changing a
random non-left-most object's shape changes later sentences as often). Two measures here, both read
from next-token likelihoods (``prh.evaluation.likelihood.choice_logprobs``) on scenes the zoo never
trained on (the eval set):

1. **The relational predictor** (``relational_items``, ``relational_accuracy``): multiple choice. The
   context is a scene's coordinates-level caption (``prh.data.captions.caption``, level 5: every
   object's centre in percent) and a relational question of ``prh.data.relational``'s form,
   "Q: what object is to the left of the other objects? A:" (left, right, above, below in turn); the
   endings are the scene's object names, " red star." (each the same number of tokens), the true one
   the object strictly furthest that way. The answer is in the context only through the coordinates,
   so a model must compare them. Accuracy, against chance = mean of 1 / objects.
2. **The gate** (``intervention_pairs``, ``relational_gate``): each held-out scene with a unique
   left-most object L is paired with its copy in which L and another object O, drawn at random, swap
   centres (``swap_positions``): the same names, in the same order, the same set of centres, but O is
   now left-most. Both captions are drawn with the same seed, so they differ only in the words that
   state positions (regions, centres, left/right/above/below). The model answers the left-most
   question on both; it **follows** the intervention on a pair when it names L in the first and O in
   the second. A model whose answer does not read the relation (any function of the names, their
   order, or the words that stay the same) answers both alike and follows none; guessing uniformly
   and independently follows a pair of n objects with probability 1 / n^2. A model passes when its
   count of followed pairs exceeds that guessing null: one-sided exact test (Poisson-binomial upper
   tail) at ``alpha``. The zoo's gate passes when at least one model passes; if none does,
   the relational test is not testable.

    prh score-relational --data results/data/shapes_eval --models results/models/gpt2_s_x2_r0_3000 ... \\
        --names gpt2_s_x2_r0_3000 ... --n-items 400 --n-pairs 200 --seed 0 --alpha 0.05 --out relational.json
"""

from __future__ import annotations

import argparse
import copy

import numpy as np

from prh.data.relational import DIRECTIONS, extreme, extreme_question

__all__ = ["CONFIG", "LEVEL", "relational_items", "swap_positions", "intervention_pairs", "score_items", "relational_accuracy",
           "follow_test", "relational_gate", "run_relational", "main"]

# the params.yaml keys `prh score-relational` reads (its rule's one --config argument, prh.slices)
CONFIG = {"convergence.relational": ("n_items", "n_pairs", "gate_alpha", "seed")}

LEVEL = 5  # coordinates: the context states every centre, so every comparison is decided by the text


def _item(scene, direction, *, seed):
    from prh.data.captions import caption, object_name

    target = extreme(scene, direction)
    names = [object_name(o) for o in scene["objects"]]
    context = f"{caption(scene, level=LEVEL, rng=np.random.default_rng(seed))} Q: {extreme_question(direction, len(names))} A:"
    return {"context": context, "endings": [f" {n}." for n in names], "label": names.index(object_name(target)),
            "direction": direction}


def relational_items(scenes: list[dict], *, n_items: int, seed: int = 0) -> list[dict]:
    """``n_items`` multiple-choice items (module docstring, 1), directions cycled left, right, above, below, each
    from the next scene (seeded order) with at least two objects and a unique extreme that way.

    Returns [{"scene", "direction", "context", "endings", "label"}]; the caption of scene i is drawn from
    ``default_rng([seed, i])``."""
    rng = np.random.default_rng(seed)
    order, items, directions = list(rng.permutation(len(scenes))), [], list(DIRECTIONS)
    while len(items) < n_items:
        direction = directions[len(items) % len(directions)]
        while order and extreme(scenes[order[0]], direction) is None:
            order.pop(0)
        if not order:
            raise ValueError(f"only {len(items)} of n_items={n_items} relational items could be made from "
                             f"{len(scenes)} scenes (one per scene): lower n_items or pass more scenes")
        i = int(order.pop(0))
        items.append({"scene": i, **_item(scenes[i], direction, seed=[seed, i])})
    return items


def swap_positions(scene: dict, rng: np.random.Generator) -> tuple[dict, int, int] | None:
    """The scene with its left-most object L and another object O (uniform) swapping centres: (copy, i_L, i_O).

    Names, their order, sizes and the set of centres stay; O becomes the strictly left-most object.
    None where the scene has no unique left-most object."""
    left = extreme(scene, "left")
    if left is None:
        return None
    objs = scene["objects"]
    i = next(k for k, o in enumerate(objs) if o is left)
    others = [k for k in range(len(objs)) if k != i]
    j = others[int(rng.integers(len(others)))]
    out = copy.deepcopy(scene)
    a, b = out["objects"][i], out["objects"][j]
    (a["x"], a["y"]), (b["x"], b["y"]) = (b["x"], b["y"]), (a["x"], a["y"])
    return out, i, j


def intervention_pairs(scenes: list[dict], *, n_pairs: int, seed: int = 0) -> list[tuple[dict, dict]]:
    """``n_pairs`` (original item, intervened item) of the left-most question (module docstring, 2): both captions
    drawn from ``default_rng([seed, i, 1])``, so they differ only where the positions do."""
    rng = np.random.default_rng([seed, 1])
    pairs = []
    for i in rng.permutation(len(scenes)):
        if len(pairs) == n_pairs:
            break
        swapped = swap_positions(scenes[i], rng)
        if swapped is None:
            continue
        other, a, b = swapped
        first, second = (_item(s, "left", seed=[seed, int(i), 1]) for s in (scenes[i], other))
        if first["label"] != a or second["label"] != b:
            raise ValueError(f"scene {i}: the swap did not move the left-most object; fix swap_positions")
        pairs.append(({"scene": int(i), **first}, {"scene": int(i), **second}))
    if len(pairs) < n_pairs:
        raise ValueError(f"only {len(pairs)} of n_pairs={n_pairs} intervention pairs from {len(scenes)} scenes")
    return pairs


def score_items(items: list[dict], score_fn) -> list[np.ndarray]:
    """Each item's endings' log-likelihoods: ``score_fn(contexts, endings) -> N x C``, called once per number of
    endings (items of C endings together), back in item order."""
    out: list = [None] * len(items)
    for c in sorted({len(it["endings"]) for it in items}):
        idx = [k for k, it in enumerate(items) if len(it["endings"]) == c]
        lp = np.asarray(score_fn([items[k]["context"] for k in idx], [items[k]["endings"] for k in idx]), dtype=float)
        for k, row in zip(idx, lp):
            out[k] = row
    return out


def relational_accuracy(items: list[dict], logprobs: list[np.ndarray]) -> dict:
    """``accuracy`` (argmax of summed log-likelihood = label), ``chance`` (mean 1 / endings), per direction."""
    right = np.array([int(np.argmax(lp)) == it["label"] for it, lp in zip(items, logprobs)])
    chance = np.array([1 / len(it["endings"]) for it in items])
    by = {d: {"accuracy": float(right[m].mean()), "chance": float(chance[m].mean()), "n": int(m.sum())}
          for d in DIRECTIONS if (m := np.array([it["direction"] == d for it in items])).any()}
    return {"accuracy": float(right.mean()), "chance": float(chance.mean()), "n_items": len(items), "by_direction": by}


def follow_test(followed, p_null) -> float:
    """P(X >= sum(followed)), X a sum of independent Bernoulli(p_null[i]): the exact Poisson-binomial upper tail."""
    dist = np.array([1.0])
    for p in np.asarray(p_null, dtype=float):
        dist = np.convolve(dist, [1 - p, p])
    return float(min(1.0, dist[int(np.sum(followed)):].sum()))


def relational_gate(pairs: list[tuple[dict, dict]], score_fn, *, alpha: float) -> dict:
    """One model's gate (module docstring, 2): ``followed`` pairs, the guessing null's ``expected`` count and ``p``,
    the answers' ``changed`` rate, accuracy on the originals and the intervened copies, ``passed`` (p < alpha)."""
    flat = [it for pair in pairs for it in pair]
    lp = score_items(flat, score_fn)
    answers = np.array([int(np.argmax(x)) for x in lp]).reshape(-1, 2)
    labels = np.array([it["label"] for it in flat]).reshape(-1, 2)
    followed = np.all(answers == labels, axis=1)
    p_null = np.array([1 / len(a["endings"]) ** 2 for a, _ in pairs])
    p = follow_test(followed, p_null)
    return {"n_pairs": len(pairs), "followed": int(followed.sum()), "expected": float(p_null.sum()), "p": p,
            "changed": float(np.mean(answers[:, 0] != answers[:, 1])),
            "accuracy_original": float(np.mean(answers[:, 0] == labels[:, 0])),
            "accuracy_intervened": float(np.mean(answers[:, 1] == labels[:, 1])), "passed": bool(p < alpha)}


def run_relational(*, data: str, names: list[str], models: list[str], out: str, n_items: int = 400, n_pairs: int = 200,
                   seed: int = 0, alpha: float = 0.05, batch_size: int = 32, device: str = "auto") -> dict:
    """Score every causal LM on the relational items and the gate; write ``out``: {"settings", "models": {name:
    {"accuracy", "chance", "n_items", "by_direction", "gate"}}, "n_passed", "gate_passed", "skipped"}."""
    from prh.data.shapes import load_dataset
    from prh.device import resolve_device, resolve_dtype
    from prh.evaluation.likelihood import choice_logprobs
    from prh.io import write_json
    from prh.models import loaders

    if len(names) != len(models):
        raise ValueError(f"names ({len(names)}) and models ({len(models)}) must pair up one to one")
    scenes = load_dataset(data).scenes
    items = relational_items(scenes, n_items=n_items, seed=seed)
    pairs = intervention_pairs(scenes, n_pairs=n_pairs, seed=seed)
    dev = resolve_device(device)
    dt = resolve_dtype("float32", dev)
    results, skipped = {}, []
    for name, path in zip(names, models):
        net, tok = loaders.load_language_model(path, dtype=dt)
        if not loaders.is_causal_lm(net.config):
            skipped.append({"model": name, "reason": "not a causal LM: no next-token probabilities"})
            continue
        fn = lambda c, e, net=net, tok=tok: choice_logprobs(net, tok, c, e, batch_size=batch_size, device=dev, dtype=dt)  # noqa: E731
        results[name] = {**relational_accuracy(items, score_items(items, fn)),
                         "gate": relational_gate(pairs, fn, alpha=alpha)}
        del net
        loaders.free_model_memory()
    n_passed = sum(r["gate"]["passed"] for r in results.values())
    result = {"settings": {"data": str(data), "level": LEVEL, "n_items": n_items, "n_pairs": n_pairs, "seed": seed,
                           "alpha": alpha, "example": items[0] if items else None},
              "models": results, "n_passed": n_passed, "gate_passed": n_passed > 0 if results else None,
              "skipped": skipped}
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh score-relational", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="held-out shapes dataset (scenes.jsonl), e.g. results/data/shapes_eval")
    p.add_argument("--models", nargs="+", required=True, help="causal LM directories (save_pretrained)")
    p.add_argument("--names", nargs="+", required=True, help="one name per model")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--out", required=True)
    settings = add_slice(p, CONFIG)  # items, intervention pairs, the gate's level, seed
    a = p.parse_args(argv)
    c = settings(a)["convergence.relational"]
    if a.batch_size < 1:
        from prh.errors import UsageError

        raise UsageError(f"--batch-size {a.batch_size} must be >= 1")
    r = run_relational(data=a.data, names=a.names, models=a.models, out=a.out, n_items=c["n_items"],
                       n_pairs=c["n_pairs"], seed=c["seed"], alpha=c["gate_alpha"], batch_size=a.batch_size,
                       device=a.device)
    print(f"{a.out}: {len(r['models'])} models; {r['n_passed']} pass the relational gate")
