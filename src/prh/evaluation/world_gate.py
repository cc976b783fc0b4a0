"""The world-derived validity gate of the language test (params.yaml ``convergence.amended.gate``).

The registered gate (``zoo_summary.language_gate``) asks each trained LM to probe background, count
and largest colour above fixed thresholds. The audit of 2026-11-26 found that it tests something the world
does not reward (the background sentence comes after the object list and nothing after it depends
on it, so a causal LM has no reason to carry it forward), that random embeddings already pass it
at the zoo's widths, and that its all-must-pass rule fails by sampling noise alone. This gate:

1. **keeps only attributes the world makes useful to an LM** (``forward_rate``): draw scenes from
   the world's generator, change one attribute (``INTERVENTIONS``: another background, the
   smallest object removed, the largest object recoloured, the left-most object reshaped),
   render both scenes' densest captions (canonical sentences), and count the scenes whose
   sentences *after the first one the change touches* differ too. A rate of 0 means the tokens
   after the attribute's mention never depend on it: predicting it cannot lower the LM's loss
   there. An attribute is kept when its rate reaches ``min_forward_rate``. For count the later
   dependence is the number of later sentences (where the caption ends), which the change of
   count makes by construction: an LM must carry the count to know when to stop, so it is kept
   by design, not by measurement; colour and shape recur by name in later sentences;
2. **compares each probe with a baseline of the same width on the same split**: the untrained
   model of the run's size, at its layer 0 (mean-pooled random token + position embeddings: a
   random-embedding bag of words as wide as the model), against the trained model at the
   layers alignment reads (``skip_language_embedding``: layers 1..L; the best on validation);
3. **tolerates sampling noise**: per model and kept attribute a one-sided exact McNemar test on
   the test items (the probe right and the baseline wrong, against the reverse); a model passes
   when every kept attribute has p < ``test_alpha``; the gate passes when at least
   ``pass_fraction`` of the gated models (each run's final checkpoint) pass;
4. **judges only what can be passed** (``judge: testable``; POST-HOC, params.yaml): where the baseline
   is wrong on fewer test items than the test needs (``min_discordant``: p = 2^-w at best, so w >= 5 at
   0.05), no model can beat it there, so that attribute is not testable for that run and the model is
   judged on its testable attributes (none testable: the model is not judged; fewer than
   ``MIN_SEEDS`` judged models: the gate cannot be judged). The rule as first written
   (``judge: every_kept``: every kept attribute) is reported beside it (``passed_as_written``,
   ``fraction_passed_as_written``).

    prh world-gate --data results/data/shapes_eval --features-dir results/features/shapes_eval \\
        --runs '{"gpt2_s_r0": {"final": "gpt2_s_r0_3000", "untrained": "gpt2_s_r0_0", "seed": 0}}' \\
        --gate '{...params.yaml convergence.amended.gate...}' --seed 0 --skip-embedding --out results/experiments/zoo/world_gate.json
"""

from __future__ import annotations

import argparse
import copy

import numpy as np

from prh.io import json_object, load_features, write_json
from prh.slices import add_slice, block_keys

__all__ = ["CONFIG", "INTERVENTIONS", "forward_rate", "mcnemar_greater", "min_discordant", "world_gate", "main"]

# the params.yaml keys `prh world-gate` reads (its rule's one --config argument, prh.slices)
CONFIG = {"convergence.amended": ("gate",), "world": block_keys("world")}


def _recolour(scene, rng):
    from prh.data.vocabulary import COLORS

    objs = scene["objects"]
    taken = {(o["color"], o["shape"]) for o in objs[1:]}
    options = [c for c in COLORS if c != objs[0]["color"] and (c, objs[0]["shape"]) not in taken]
    if not options:
        return None
    objs[0]["color"] = options[rng.integers(len(options))]
    return scene


def _reshape_leftmost(scene, rng):
    from prh.data.vocabulary import SHAPES

    objs = scene["objects"]
    left = min(objs, key=lambda o: o["x"])
    taken = {(o["color"], o["shape"]) for o in objs if o is not left}
    options = [s for s in SHAPES if s != left["shape"] and (left["color"], s) not in taken]
    if not options:
        return None
    left["shape"] = options[rng.integers(len(options))]
    return scene


def _rebackground(scene, rng):
    from prh.data.vocabulary import BACKGROUNDS

    options = [b for b in BACKGROUNDS if b != scene["background"]]
    scene["background"] = options[rng.integers(len(options))]
    return scene


def _drop_smallest(scene, rng):
    if len(scene["objects"]) < 2:
        return None
    scene["objects"] = scene["objects"][:-1]  # objects are listed largest first
    return scene


# world task -> a change of the scene that changes that task's label (None where the scene allows none)
INTERVENTIONS = {"background": _rebackground, "count": _drop_smallest, "largest_color": _recolour,
                 "leftmost_shape": _reshape_leftmost}


def _sentences(scene, level: int) -> list[str]:
    from prh.data.captions import caption_options

    return [" ".join(slot[0]) if isinstance(slot[0], tuple) else slot[0] for slot in caption_options(scene, level=level)]


def forward_rate(task: str, *, n_scenes: int, seed: int, level: int = 5, world: dict | None = None) -> dict:
    """How often the densest caption's later sentences depend on ``task``'s attribute (module docstring, 1).

    Returns ``{"rate", "n"}``: of ``n`` generator scenes the change applies to, the fraction whose
    sentences after the first changed one differ between the scene and its changed copy."""
    from prh.data.shapes import sample_scene
    from prh.data.tasks import TASKS

    if task not in INTERVENTIONS:
        raise ValueError(f"task {task!r} has no intervention; the gate's candidates are {sorted(INTERVENTIONS)}")
    rng = np.random.default_rng(seed)
    changed = n = 0
    for _ in range(n_scenes):
        scene = sample_scene(rng, world=world)
        other = INTERVENTIONS[task](copy.deepcopy(scene), rng)
        if other is None:
            continue
        if TASKS[task].label(other) == TASKS[task].label(scene):
            raise ValueError(f"the {task} intervention left the attribute unchanged: fix INTERVENTIONS[{task!r}]")
        a, b = _sentences(scene, level), _sentences(other, level)
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if first is None:
            raise ValueError(f"level-{level} captions do not state {task}: no sentence changes with it; "
                             "pick a denser level")
        n += 1
        changed += a[first + 1:] != b[first + 1:]
    return {"rate": changed / n if n else None, "n": n}


def mcnemar_greater(right_a, right_b) -> dict:
    """One-sided exact McNemar test that ``a`` is right more often than ``b`` on the same items:
    ``a_only`` = a right and b wrong, ``b_only`` = the reverse; p = P(X >= a_only), X ~ Binomial(a_only + b_only, 1/2)."""
    from scipy.stats import binomtest

    a, b = np.asarray(right_a, dtype=bool), np.asarray(right_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired items differ in number: {a.shape} vs {b.shape}")
    b_only, c_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    p = 1.0 if b_only + c_only == 0 else float(binomtest(b_only, b_only + c_only, 0.5, alternative="greater").pvalue)
    return {"a_only": b_only, "b_only": c_only, "p": p}


def min_discordant(alpha: float) -> int:
    """The fewest baseline errors with which :func:`mcnemar_greater` can reach p < ``alpha``: with w items
    the baseline gets wrong, the best a model can do is right on all w and wrong on none, p = 2^-w."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must lie in (0, 1)")
    w = 1
    while 0.5 ** w >= alpha:
        w += 1
    return w


def world_gate(*, scenes: list[dict], features: dict[str, np.ndarray], runs: dict[str, dict], gate: dict,
               seed: int = 0, world: dict | None = None, skip_embedding: bool = True) -> dict:
    """The gate (module docstring). ``features``: model name -> N x L x D features of ``scenes`` for every
    run's ``final`` and ``untrained`` model; ``gate``: params.yaml ``convergence.amended.gate``;
    ``skip_embedding``: probe layers 1..L, as alignment reads them (``alignment.skip_language_embedding``)."""
    from prh.data.tasks import TASKS, task_labels
    from prh.evaluation.probes import split_indices

    forward = {t: forward_rate(t, n_scenes=gate["n_scenes"], seed=seed, level=gate["level"], world=world)
               for t in gate["candidates"]}
    kept = [t for t, f in forward.items() if f["rate"] is not None and f["rate"] >= gate["min_forward_rate"]]
    from prh.claims import MIN_SEEDS

    labels = task_labels(scenes, kept) if kept else {}
    judge = gate.get("judge", "testable")
    if judge not in ("testable", "every_kept"):
        raise ValueError(f"gate judge={judge!r} must be 'testable' or 'every_kept'")
    need = min_discordant(gate["test_alpha"]) if judge == "testable" else 0
    splits = split_indices(len(scenes), seed=seed)
    models = {}
    for run, r in runs.items():
        final, base = features[r["final"]], features[r["untrained"]]
        if len(final) != len(scenes) or len(base) != len(scenes):
            raise ValueError(f"run {run}: features hold {len(final)} / {len(base)} items, the scenes {len(scenes)}")
        first = 1 if skip_embedding else 0
        if final.shape[1] <= first:
            raise ValueError(f"run {run}: {r['final']} has {final.shape[1]} layer(s); the gate reads layers {first}..L")
        tasks = {}
        for t in kept:
            m = _probe(final, labels[t], splits, layers=list(range(first, final.shape[1])), k=TASKS[t].num_classes)
            b = _probe(base[:, :1], labels[t], splits, layers=[0], k=TASKS[t].num_classes)
            baseline_right = b.pop("correct")
            test = mcnemar_greater(m.pop("correct"), baseline_right)
            wrong = int(np.size(baseline_right) - np.count_nonzero(baseline_right))
            testable = wrong >= need
            # an attribute no model can win on is not a failure: passed None
            tasks[t] = {"model": m, "baseline": b, **test, "baseline_wrong": wrong, "testable": testable,
                        "passed": test["p"] < gate["test_alpha"] if testable else None}
        judged_on = [x for x in tasks.values() if x["testable"]]
        models[r["final"]] = {"run": run, "seed": r.get("seed"), "baseline_model": r["untrained"], "width": int(final.shape[2]),
                              "tasks": tasks, "testable": [t for t, x in tasks.items() if x["testable"]],
                              "passed": all(x["passed"] for x in judged_on) if judged_on else None,
                              "passed_as_written": bool(kept) and all(x["p"] < gate["test_alpha"] for x in tasks.values())}
    judged = [m for m in models.values() if m["passed"] is not None]
    n_pass = sum(bool(m["passed"]) for m in judged)
    fraction = n_pass / len(judged) if judged else None
    written = sum(m["passed_as_written"] for m in models.values()) / len(models) if models else None
    reason = None
    if not kept:
        reason = "no candidate attribute tells about later tokens: the gate cannot be judged"
    elif len(judged) < MIN_SEEDS:
        reason = (f"{len(judged)} of {len(models)} models have an attribute whose baseline is wrong on at least {need} "
                  f"test items (needed: {MIN_SEEDS} models): the gate cannot be judged")
    untestable = sorted({t for m in models.values() for t, x in m["tasks"].items() if not x["testable"]})
    return {"settings": {**gate, "judge": judge, "skip_embedding": skip_embedding, "seed": seed, "min_discordant": need},
            "forward": forward, "kept": kept, "untestable": untestable, "models": models,
            "n_models": len(models), "n_judged": len(judged), "n_passed": n_pass, "fraction_passed": fraction,
            "passed": None if reason else fraction >= gate["pass_fraction"],
            "fraction_passed_as_written": written,
            "passed_as_written": None if written is None or not kept else written >= gate["pass_fraction"],
            "reason": reason}


def _probe(feats, labels, splits, *, layers, k) -> dict:
    from prh.evaluation.probes import probe_task

    r = probe_task(feats, labels, splits, layer="best", layers=layers, num_classes=k, correct=True)
    r.pop("test_items")
    return {key: r[key] for key in ("accuracy", "val_accuracy", "layer", "C", "chance", "n_test", "correct")}


def main(argv: list[str] | None = None) -> None:
    from pathlib import Path

    from prh.data.shapes import load_dataset

    p = argparse.ArgumentParser(prog="prh world-gate", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the shapes dataset the features were extracted from")
    p.add_argument("--features-dir", required=True, help="folder of <model>.safetensors features of --data")
    p.add_argument("--runs", type=json_object, required=True,
                   help='JSON {run: {"final": model, "untrained": model, "seed": its seed}} (prh.config.language_runs)')
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of the generator draws")
    p.add_argument("--skip-embedding", action="store_true", help="probe layers 1..L (alignment.skip_language_embedding)")
    p.add_argument("--out", required=True)
    settings = add_slice(p, CONFIG)  # the amended gate's settings; the world, whose generator it draws from
    a = p.parse_args(argv)
    config = settings(a)
    names = sorted({m for r in a.runs.values() for m in (r["final"], r["untrained"])})
    feats = {n: load_features(Path(a.features_dir) / f"{n}.safetensors").float().numpy() for n in names}
    result = world_gate(scenes=load_dataset(a.data).scenes, features=feats, runs=a.runs,
                        gate=config["convergence.amended"]["gate"], seed=a.seed, world=config["world"],
                        skip_embedding=a.skip_embedding)
    write_json(a.out, result)
    print(f"kept {result['kept']}; {result['n_passed']} of {result['n_judged']} judged models pass (of {result['n_models']}); "
          f"gate passed: {result['passed']} (as first written: {result['passed_as_written']})")
