"""Captions: six nested densities, paraphrase templates, synonyms, and a parser that reads the facts back."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from prh.data import captions as C
from prh.data.qa import qa_pairs
from prh.data.shapes import sample_scene
from prh.data.vocabulary import BACKGROUNDS, CANONICAL, COLORS, SHAPES, SYNONYMS


@pytest.fixture(scope="module")
def scenes():
    rng = np.random.default_rng(1)
    return [sample_scene(rng) for _ in range(200)]


@pytest.fixture(scope="module")
def texts(scenes):
    """Per scene, one caption per level, each level with its own seeded stream."""
    return [C.captions(s, seed=i) for i, s in enumerate(scenes)]


def test_grammar_has_enough_levels_and_paraphrases():
    assert len(C.LEVELS) >= 5 and len(C.LEVEL_DESCRIPTIONS) == len(C.LEVELS)
    for kind, templates in C.CONSTRUCTIONS.items():
        assert len(templates) >= 3 and len(set(templates)) == len(templates), kind


def test_captions_state_exactly_their_facts(scenes, texts):
    for scene, per_level in zip(scenes, texts):
        assert len(per_level) == len(C.LEVELS)
        for level, text in enumerate(per_level):
            assert C.parse_caption(text) == C.scene_facts(scene, level=level), text


def test_each_level_determines_every_fact_of_the_level_below(scenes, texts):
    """Strictly nested information: read from the text, not from the generator."""
    for scene, per_level in zip(scenes, texts):
        facts = [C.parse_caption(t) for t in per_level]
        for level in range(1, len(facts)):
            assert facts[level] >= facts[level - 1], (level, per_level[level])
            # only pairwise relations need two objects; every other level adds facts to any scene
            if level != C.LEVELS.index("relations") or len(scene["objects"]) > 1:
                assert facts[level] > facts[level - 1], (level, per_level[level])


def test_densest_caption_determines_the_scene(scenes, texts):
    """Level 5 is (up to rounding of the centres) a bijective observation of the scene."""
    for scene, per_level in zip(scenes, texts):
        facts = C.parse_caption(per_level[-1])
        by_kind = {}
        for f in facts:
            by_kind.setdefault(f[0], []).append(f[1:])
        assert by_kind["background"] == [(scene["background"],)]
        assert by_kind["count"] == [(len(scene["objects"]),)]
        sizes, positions = dict(by_kind["size"]), {f[0]: f[1:] for f in by_kind["position"]}
        for o in scene["objects"]:
            name = C.object_name(o)
            assert sizes[name] == o["size"]
            assert np.allclose(np.array(positions[name]) / 100, [o["x"], o["y"]], atol=0.005)


def test_captions_grow_with_level_and_start_with_a_few_words(texts):
    words = np.array([[len(t.split()) for t in per_level] for per_level in texts])
    assert words[:, 0].max() <= 8
    assert np.all(np.diff(words.mean(0)) > 0)
    assert words[:, -1].max() < 220  # short enough for 256-token encoders


def test_same_seed_same_text_other_seed_other_wording(scenes):
    scene = next(s for s in scenes if len(s["objects"]) == 4)
    for level in range(len(C.LEVELS)):
        assert C.caption(scene, level=level, rng=5) == C.caption(scene, level=level, rng=np.random.default_rng(5))
        wordings = {C.caption(scene, level=level, rng=seed) for seed in range(10)}
        assert len(wordings) >= 3, level
        assert len({C.parse_caption(w) for w in wordings}) == 1  # different words, same facts
    assert C.captions(scene, seed=3) == C.captions(scene, seed=3)


def test_every_template_is_used(texts):
    used = Counter()
    for per_level in texts:
        for text in per_level:
            for sentence in text.split(". "):
                sentence = sentence.rstrip(".") + "."
                sentence = sentence[0].lower() + sentence[1:]
                used.update(p.pattern for _, p in C._PATTERNS if p.fullmatch(sentence))
    unused = [p.pattern for _, p in C._PATTERNS if used[p.pattern] == 0]
    assert not unused


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="level"):
        C.scene_facts({"background": "grey", "objects": []}, level=6)
    with pytest.raises(ValueError, match="matches no caption template"):
        C.parse_caption("A red circle. The moon is made of cheese.")
    with pytest.raises(ValueError, match="does not name"):
        C.parse_caption("Three objects: a red circle and a blue square.")


def test_regions_and_relations_follow_the_coordinates():
    a = {"shape": "circle", "color": "red", "size": "small", "x": 0.1, "y": 0.9}
    b = {"shape": "star", "color": "blue", "size": "small", "x": 0.5, "y": 0.5}
    scene = {"background": "white", "objects": [a, b]}
    assert C.region(a) == "lower left" and C.region(b) == "centre"
    facts = C.scene_facts(scene, level=4)
    assert ("left_of", "red circle", "blue star") in facts and ("above", "blue star", "red circle") in facts
    assert ("position", "red circle", 10, 90) in C.scene_facts(scene, level=5)
    assert C.canonical_text(C.caption(scene, level=0, rng=0))[0] in {
        "A red circle.", "There is a red circle.", "A picture of a red circle.", "An image with a red circle in it."}


# ---------------------------------------------------------------- synonyms


def test_synonym_table_is_one_word_unique_forms_that_no_other_slot_writes(scenes):
    assert list(SYNONYMS) == [*COLORS, *SHAPES]
    forms = [f for fs in SYNONYMS.values() for f in fs]
    assert len(forms) == len(set(forms)) == len(CANONICAL)  # unique across the whole table
    for name, fs in SYNONYMS.items():
        assert fs[0] == name and 2 <= len(fs) <= 3 and len(set(fs)) == len(fs)
        assert all(re.fullmatch(r"[a-z]+", f) for f in fs), fs  # one word: the tokenizer splits on non-word characters
    # every other word the grammar writes: templates, slot vocabularies, question-answer pairs
    other = " ".join([t for ts in C.CONSTRUCTIONS.values() for t in ts] + list(BACKGROUNDS) + list(C.SIZE_WORDS.values())
                     + list(sum(C.REGIONS, ())) + list(C.COUNT_WORDS) + ["an a objects shapes are is left right above below"]
                     + [f"Q: {q} A: {a}." for s in scenes[:50] for q, a in qa_pairs(s)])
    other_words = {w.lower() for w in re.findall(r"\w+", re.sub(r"\{\w+\}", " ", other))} - set(SYNONYMS)
    assert "x" in other_words and "left" in other_words and "colour" in other_words  # the check sees them
    assert not set(forms) & other_words, set(forms) & other_words


def test_parse_roundtrip_with_synonyms_over_many_scenes_and_seeds():
    rng = np.random.default_rng(5)
    for i in range(300):
        scene = sample_scene(rng)
        for level in range(len(C.LEVELS)):
            text = C.caption(scene, level=level, rng=np.random.default_rng([i, level, 9]))
            assert C.parse_caption(text) == C.scene_facts(scene, level=level), text
            canonical, forms = C.canonical_text(text)
            assert C.apply_forms(canonical, forms) == text
            assert set(re.findall(r"\w+", canonical)) >= set(C.object_name(scene["objects"][0]).split())
            assert not set(re.findall(r"\w+", canonical)) & (set(CANONICAL) - set(SYNONYMS))  # no form left


def test_articles_follow_the_drawn_form():
    assert C.canonical_text("An amber disc. A red circle is here and an orange box.") == (
        "An orange circle. A red circle is here and an orange square.", ("amber", "disc", "red", "circle", "orange", "box"))
    assert C.apply_forms("A red circle and an orange star.", ["crimson", "dot", "amber", "starburst"]) == \
        "A crimson dot and an amber starburst."
    scene = {"background": "grey", "objects": [{"shape": "circle", "color": "orange", "size": "large", "x": 0.5, "y": 0.5}]}
    for seed in range(40):
        for article, word in re.findall(r"\b(an?|An?) (\w+)", C.caption(scene, level=1, rng=seed)):
            if word in CANONICAL:
                assert (article.lower() == "an") == (word[0] in "aeiou"), (article, word)
    with pytest.raises(ValueError, match="forms"):
        C.apply_forms("A red circle.", ["amber", "disc"])  # amber is no form of red
    with pytest.raises(ValueError, match="forms"):
        C.apply_forms("A red circle.", ["red"])


def test_every_form_is_drawn_about_uniformly(texts):
    """Over the fixture's captions (~20,000 mentions), each name's forms are equally frequent (chi-square per name)."""
    counts = Counter(f for per_level in texts for text in per_level for f in C.canonical_text(text)[1])
    assert set(counts) == set(CANONICAL)  # every form occurs
    for name, fs in SYNONYMS.items():
        observed = np.array([counts[f] for f in fs])
        expected = observed.sum() / len(fs)
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert observed.sum() > 200 and chi2 < 16.0, (name, observed)  # df <= 2: P(chi2 > 16) < 0.0004
    total = sum(counts.values())
    assert total > 10_000 and math.isclose(sum(counts[f] for f in CANONICAL if CANONICAL[f] == f) / total, 1 / 3,
                                           abs_tol=0.02)


# ---------------------------------------------------------------- question-answer pairs


def test_every_qa_answer_is_a_fact_of_the_scene(scenes):
    """Each kind's answer agrees with scene_facts (the captions' own reading of the scene), and
    the position and left/right kinds are asked of every object and every pair."""
    kinds = Counter()
    for scene in scenes:
        facts = C.scene_facts(scene, level=len(C.LEVELS) - 1)
        pairs = qa_pairs(scene)
        assert len({q for q, _ in pairs}) == len(pairs)  # no question asked twice
        for q, a in pairs:
            if m := re.fullmatch(r"where exactly is the (\w+ \w+)\?", q):
                region, x, y = re.fullmatch(r"(.+), at \((\d+), (\d+)\)", a).groups()
                assert ("region", m[1], region) in facts and ("position", m[1], int(x), int(y)) in facts, (q, a)
                kinds["position"] += 1
            elif m := re.fullmatch(r"is the (\w+ \w+) left or right of the (\w+ \w+)\?", q):
                left, right = (m[1], m[2]) if a == "left" else (m[2], m[1])
                assert a in ("left", "right") and ("left_of", left, right) in facts, (q, a)
                kinds["left_right"] += 1
            elif m := re.fullmatch(r"where is the (\w+ \w+)\?", q):
                assert ("region", m[1], a) in facts, (q, a)
                kinds["region"] += 1
            elif q == "how many objects are there?":
                assert ("count", C.COUNT_WORDS.index(a) + 1) in facts
                kinds["count"] += 1
            elif q == "what colour is the background?":
                assert ("background", a) in facts
                kinds["background"] += 1
            else:
                kinds["colour_or_shape"] += 1
    n_objects = sum(len(s["objects"]) for s in scenes)
    n_pairs = sum(math.comb(len(s["objects"]), 2) for s in scenes)
    assert kinds["position"] == kinds["region"] == n_objects and kinds["left_right"] == n_pairs > 0
    assert kinds["count"] == kinds["background"] == len(scenes) and kinds["colour_or_shape"] > 0
