"""The relational predictor and gate: items decided by the coordinates, an intervention that moves only
which object is left-most, a test that a position-reading scorer passes and a position-blind one cannot."""

from __future__ import annotations

import re

import numpy as np
import pytest

from prh.data.captions import parse_caption
from prh.data.shapes import build_dataset, sample_scene
from prh.evaluation.relational import (
    follow_test,
    intervention_pairs,
    relational_accuracy,
    relational_gate,
    relational_items,
    score_items,
    swap_positions,
)
from prh.evaluation.relational import main as relational_main
from prh.io import read_json

SIGN = {"left": (2, 1), "right": (2, -1), "above": (3, 1), "below": (3, -1)}  # fact index of x / y, sign


def scenes(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return [sample_scene(rng) for _ in range(n)]


def _facts(context):
    caption, question = context.split(" Q: ")
    direction = next(d for d in SIGN if f" {d} " in f" {question} " or f"{d} the other" in question)
    return parse_caption(caption), direction


def oracle(contexts, endings):
    """Reads each ending's centre from the caption and scores the comparison the question asks."""
    out = []
    for c, ends in zip(contexts, endings):
        facts, direction = _facts(c)
        k, sign = SIGN[direction]
        pos = {f[1]: f for f in facts if f[0] == "position"}
        out.append([-sign * pos[e.strip(" .")][k] for e in ends])
    return np.array(out, dtype=float)


def blind(contexts, endings):
    """Ignores positions: prefers the first-listed name (any function of the names alone does as well)."""
    return np.array([[-i for i in range(len(e))] for e in endings], dtype=float)


def test_items_are_decided_by_the_coordinates_and_chance_is_one_over_the_objects():
    items = relational_items(scenes(), n_items=80, seed=1)
    assert [it["direction"] for it in items[:4]] == ["left", "right", "above", "below"]
    assert len({it["scene"] for it in items}) == 80  # one item per scene
    good = relational_accuracy(items, score_items(items, oracle))
    bad = relational_accuracy(items, score_items(items, blind))
    assert good["accuracy"] == 1.0 and bad["accuracy"] < 0.7
    assert good["chance"] == pytest.approx(np.mean([1 / len(it["endings"]) for it in items]))
    assert set(good["by_direction"]) == {"left", "right", "above", "below"}
    assert all(len(it["endings"]) == len(set(it["endings"])) >= 2 for it in items)  # one name per object
    assert all(len(re.findall(r"\w+", e)) == 2 for it in items for e in it["endings"])  # each as long: "red star"
    assert relational_items(scenes(), n_items=80, seed=1) == items  # seeded
    with pytest.raises(ValueError, match="n_items"):
        relational_items(scenes(5), n_items=50)


def test_the_swap_keeps_the_names_and_moves_the_left_most_object():
    rng = np.random.default_rng(0)
    for scene in scenes(200):
        out = swap_positions(scene, rng)
        if out is None:
            xs = sorted(o["x"] for o in scene["objects"])
            assert len(xs) < 2 or xs[0] == xs[1]
            continue
        other, i, j = out
        names = lambda s: [(o["color"], o["shape"], o["size"]) for o in s["objects"]]  # noqa: E731
        assert names(other) == names(scene) and i != j
        assert sorted((o["x"], o["y"]) for o in other["objects"]) == sorted((o["x"], o["y"]) for o in scene["objects"])
        assert min(scene["objects"], key=lambda o: o["x"]) is scene["objects"][i]
        assert min(other["objects"], key=lambda o: o["x"]) is other["objects"][j]


def test_paired_texts_differ_only_where_positions_are_stated():
    pairs = intervention_pairs(scenes(), n_pairs=30, seed=2)
    for a, b in pairs:
        assert a["endings"] == b["endings"] and a["label"] != b["label"]
        fa, fb = parse_caption(a["context"].split(" Q: ")[0]), parse_caption(b["context"].split(" Q: ")[0])
        same = {f for f in fa if f[0] in ("object", "count", "background", "size")}
        assert same == {f for f in fb if f[0] in ("object", "count", "background", "size")}
        # the same template and word-form draws: equal word counts, position words aside
        assert len(a["context"].split()) == len(b["context"].split())


def test_the_gate_passes_a_scorer_that_reads_positions_and_no_position_blind_one():
    pairs = intervention_pairs(scenes(), n_pairs=60, seed=3)
    good = relational_gate(pairs, oracle, alpha=0.05)
    assert good["followed"] == 60 and good["passed"] and good["p"] < 1e-20 and good["changed"] == 1.0
    bad = relational_gate(pairs, blind, alpha=0.05)
    assert bad["followed"] == 0 and not bad["passed"] and bad["p"] == pytest.approx(1.0) and bad["changed"] == 0.0
    rng = np.random.default_rng(0)
    noise = relational_gate(pairs, lambda c, e: rng.random((len(c), len(e[0]))), alpha=0.05)
    assert not noise["passed"] and 0 < noise["expected"] < 60


def test_the_follow_test_is_the_exact_poisson_binomial_tail():
    assert follow_test([1, 1], [0.25, 0.25]) == pytest.approx(0.0625)
    assert follow_test([1, 0], [0.25, 0.25]) == pytest.approx(1 - 0.75**2)
    assert follow_test([0, 0, 0], [0.1, 0.2, 0.3]) == pytest.approx(1.0)
    from scipy.stats import binom

    assert follow_test([1] * 7 + [0] * 13, [1 / 9] * 20) == pytest.approx(binom.sf(6, 20, 1 / 9))


def test_a_tiny_model_runs_through_the_command(tmp_path):
    """A few training steps on relational text: the real likelihood path, end to end; the numbers are in range."""
    from prh.models.language_zoo import main as train_main
    from prh.models.language_zoo import tokenizer_main

    train, held = build_dataset(tmp_path / "train", n=30, seed=1), build_dataset(tmp_path / "eval", n=60, seed=2)
    tok = tmp_path / "tok"
    tokenizer_main(["--data", str(train), "--out", str(tok)])
    train_main(["--data", str(train), "--tokenizer", str(tok), "--arch", "gpt2", "--n-layer", "1", "--n-embd", "16",
                "--n-head", "2", "--steps", "3", "--batch-size", "4", "--warmup", "1", "--qa-pairs", "2",
                "--relational", "1.0", "--out", str(tmp_path / "m")])
    assert read_json(tmp_path / "m" / "training.json")["relational"] == 1.0
    out = tmp_path / "rel.json"
    relational_main(["--data", str(held), "--models", str(tmp_path / "m"), "--names", "m", "--n-items", "12",
                     "--n-pairs", "8", "--out", str(out)])
    r = read_json(out)["models"]["m"]
    assert r["n_items"] == 12 and 0 <= r["accuracy"] <= 1 and 0.25 <= r["chance"] <= 0.5
    assert r["gate"]["n_pairs"] == 8 and 0 <= r["gate"]["followed"] <= 8 and 0 < r["gate"]["p"] <= 1
    from prh.errors import UsageError

    with pytest.raises(UsageError, match="batch-size"):
        relational_main(["--data", str(held), "--models", "x", "--names", "x", "--batch-size", "0", "--out", str(out)])
    with pytest.raises(UsageError, match="convergence.relational.n_items: 0 is less than the minimum of 1"):
        relational_main(["--data", str(held), "--models", "x", "--names", "x", "--n-items", "0", "--out", str(out)])
