"""Exact generator probabilities: scenes sum to 1, captions' template choices, Monte Carlo against the sampler."""

import math
import re
from collections import Counter
from itertools import combinations, permutations, product

import numpy as np
import pytest

from prh.data.captions import T_BACKGROUND, T_COORD, T_LIST, T_PAIR, canonical_text, caption, caption_options
from prh.data.shapes import sample_scene
from prh.data.vocabulary import CANONICAL, SYNONYMS
from prh.data.world_prob import WorldModel, caption_bits, entropy_floor_bpb, scene_log2prob, world_model

CELLS = ((17, 17), (50, 17), (17, 50))


def tiny_model(jitter=1):
    """2 types, 2 backgrounds, 3 colours (one never drawn), 2 shapes, 2 sizes, 3 cells, 1-2 objects."""
    return WorldModel(type_weights=np.array([0.3, 0.7]), backgrounds=("black", "white"),
                      p_bg=np.array([[0.9, 0.1], [0.25, 0.75]]), colors=("red", "blue", "green"),
                      p_color=np.array([[0.6, 0.4, 0.0], [0.15, 0.85, 0.0]]), shapes=("circle", "square"),
                      p_shape=np.array([[0.5, 0.5], [0.8, 0.2]]), min_objects=1, max_objects=2,
                      sizes=("small", "large"), cells=CELLS, jitter=jitter)


def tiny_scenes(model):
    """Every distinct discrete scene of the tiny model's vocabulary (zero-probability colours included)."""
    pairs = list(product(model.colors, model.shapes))
    offsets = range(-model.jitter, model.jitter + 1)
    for n in (1, 2):
        for bg, objs in product(model.backgrounds, combinations(pairs, n)):
            for sizes, cells, jit in product(product(model.sizes, repeat=n), permutations(model.cells, n),
                                             product(offsets, repeat=2 * n)):
                yield {"background": bg, "objects": [
                    {"color": c, "shape": s, "size": z, "x": (cx + jit[2 * k]) / 100, "y": (cy + jit[2 * k + 1]) / 100}
                    for k, ((c, s), z, (cx, cy)) in enumerate(zip(objs, sizes, cells))]}


def test_tiny_world_probabilities_sum_to_one():
    model = tiny_model()
    total = sum(2.0 ** scene_log2prob(s, model) for s in tiny_scenes(model))
    assert total == pytest.approx(1.0, abs=1e-9)


def test_tiny_world_matches_the_hand_formula():
    model = tiny_model(jitter=0)
    one = {"background": "white", "objects": [{"color": "red", "shape": "square", "size": "large", "x": 0.5, "y": 0.17}]}
    # p(n=1) = 1/2; Σ_t w_t p_bg p_color p_shape; size 1/2; cell 1/3
    want = 0.5 * (0.3 * 0.1 * 0.6 * 0.5 + 0.7 * 0.75 * 0.15 * 0.2) * 0.5 / 3
    assert 2 ** scene_log2prob(one, model) == pytest.approx(want, rel=1e-12)
    second = {"color": "blue", "shape": "circle", "size": "small", "x": 0.17, "y": 0.17}
    two = {"background": "black", "objects": [one["objects"][0], second]}
    q = [np.outer(model.p_color[t], model.p_shape[t]) for t in range(2)]
    a, b = (0, 1), (1, 0)  # red square, blue circle
    orders = [q[t][a] * q[t][b] / (1 - q[t][a]) + q[t][b] * q[t][a] / (1 - q[t][b]) for t in range(2)]
    want = 0.5 * (0.3 * 0.9 * orders[0] + 0.7 * 0.25 * orders[1]) * 0.25 / (3 * 2)
    assert 2 ** scene_log2prob(two, model) == pytest.approx(want, rel=1e-12)
    assert 2 ** scene_log2prob({**two, "objects": two["objects"][::-1]}, model) == pytest.approx(want, rel=1e-12)
    # off the support: a never-drawn colour, a shared cell, a centre off the grid or between percents
    for bad in ({**one, "objects": [{**one["objects"][0], "color": "green"}]},
                {**two, "objects": [one["objects"][0], {**second, "x": 0.5}]},
                {**one, "objects": [{**one["objects"][0], "x": 0.51}]},
                {**one, "objects": [{**one["objects"][0], "x": 0.505}]}):
        assert scene_log2prob(bad, model) == -math.inf
    with pytest.raises(ValueError, match="color 'purple'"):
        scene_log2prob({**one, "objects": [{**one["objects"][0], "color": "purple"}]}, model)


def test_world_model_rejects_bad_tables():
    with pytest.raises(ValueError, match="p_bg"):
        WorldModel(**{**tiny_model().__dict__, "p_bg": np.array([[0.5, 0.6], [0.5, 0.5]])})
    with pytest.raises(ValueError, match="jitter"):
        WorldModel(**{**tiny_model().__dict__, "jitter": 17})


SCENE = {"background": "navy", "objects": [  # in the generator's order: largest first, then by x
    {"shape": "circle", "color": "red", "size": "large", "x": 0.17, "y": 0.5},
    {"shape": "star", "color": "red", "size": "large", "x": 0.83, "y": 0.5}]}  # a tie in y: "above" decided by x


def _mention_bits(text):
    """Σ log2 |forms| over the colour and shape words of a text: the synonym draws' bits."""
    return sum(math.log2(len(SYNONYMS[CANONICAL[w]])) for w in re.findall(r"\w+", text) if w in CANONICAL)


def _chi2_against(drawn, probs):
    observed = Counter(drawn)
    assert set(observed) <= set(probs)
    expected = np.array([len(drawn) * p for p in probs.values()])
    counts = np.array([observed.get(t, 0) for t in probs])
    return float(((counts - expected) ** 2 / expected).sum())


def test_every_template_choice_gives_its_own_text_and_exact_bits():
    """Template and subject choices of a two-object scene, in canonical words (synonym draws: the tests below)."""
    world = world_model()
    options = caption_options(SCENE, level=5)
    scene_bits = -scene_log2prob(SCENE, world)
    texts, total = {}, 0.0
    choices = [[(variant, sentence) for variant in slot for sentence in variant] for slot in options]
    for combo in product(*choices):
        p = math.prod(1 / (len(variant) * len(slot)) for (variant, _), slot in zip(combo, options))
        text = " ".join(sentence for _, sentence in combo)
        assert text not in texts
        texts[text] = p
        total += p
        # the canonical words are one draw of the synonyms: 12 mentions of 3 forms each here
        assert _mention_bits(text) == pytest.approx(12 * math.log2(3))
        assert caption_bits(text, world=world) == pytest.approx(scene_bits - math.log2(p) + _mention_bits(text), abs=1e-9)
    # the choices are the grammar's: list, background, 2 objects, 1 pair with its subject coin
    assert len(texts) == len(T_LIST) * len(T_BACKGROUND) * len(T_COORD) ** 2 * 2 * len(T_PAIR)
    assert total == pytest.approx(1.0, abs=1e-12)
    # and caption() draws exactly these canonical texts, at these probabilities (a seeded chi-square check)
    drawn = [canonical_text(caption(SCENE, level=5, rng=seed))[0] for seed in range(20000)]
    assert _chi2_against(drawn, texts) < len(texts) + 6 * math.sqrt(2 * len(texts))  # df = 647: mean 647, sd 36


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


ONE = {"background": "white", "objects": [{"shape": "diamond", "color": "orange", "size": "small", "x": 0.17, "y": 0.83}]}


def test_every_choice_with_synonyms_gives_its_own_text_and_exact_bits():
    """All choices of a one-object level-5 caption, synonyms included, written from the templates here."""
    world = world_model()
    scene_bits = -scene_log2prob(ONE, world)
    colors, shapes = SYNONYMS["orange"], SYNONYMS["diamond"]
    texts = {}
    for t_list, t_bg, t_coord, c1, s1, c2, s2 in product(T_LIST, T_BACKGROUND, T_COORD, colors, shapes, colors, shapes):
        sentences = [t_list.format(count="one", objects="object", shapes="shape", are="is", list=_a(f"{c1} {s1}")),
                     t_bg.format(bg="white"),
                     t_coord.format(obj=f"{c2} {s2}", size="small", region="lower left", x=17, y=83)]
        text = " ".join(x[0].upper() + x[1:] for x in sentences)
        assert text not in texts
        texts[text] = 1 / (len(T_LIST) * len(T_BACKGROUND) * len(T_COORD) * (len(colors) * len(shapes)) ** 2)
        assert caption_bits(text, world=world) == pytest.approx(scene_bits - math.log2(texts[text]), abs=1e-9)
    assert len(texts) == 4 * 3 * 3 * 9 ** 2 and sum(texts.values()) == pytest.approx(1.0, abs=1e-12)
    assert any(": an amber rhombus." in t for t in texts) and any(": a tangerine lozenge." in t for t in texts)
    drawn = [caption(ONE, level=5, rng=seed) for seed in range(20000)]
    assert _chi2_against(drawn, texts) < len(texts) + 6 * math.sqrt(2 * len(texts))  # df = 2915: mean 2915, sd 76


def test_pair_sentence_synonyms_and_subject_coin_are_exact():
    """The two-object scene's pair slot, every subject, template and form (the other slots fixed)."""
    world = world_model()
    head = caption(SCENE, level=5, rng=0).split(". ")[:-1]  # list, background, both objects
    head_bits = caption_bits(caption(SCENE, level=5, rng=0), world=world)
    last = canonical_text(caption(SCENE, level=5, rng=0).split(". ")[-1])[0]
    last_p = sum(v.count(last) / len(v) for v in caption_options(SCENE, level=5)[-1]) / 2 / 3 ** 4
    head_bits += math.log2(last_p)  # the bits of the first four sentences
    a, b = ("red circle", "red star")
    pair_p, total = {}, 0.0
    for (subj, other), template, c1, s1, c2, s2 in product(((a, b), (b, a)), T_PAIR, *[SYNONYMS[w] for w in
                                                            (*a.split(), *b.split())]):
        forms = {a: f"{c1} {s1}", b: f"{c2} {s2}"}
        h, v = ("left", "above") if subj == a else ("right", "below")  # the circle lies left; a y tie, decided by x
        sentence = template.format(obj=forms[subj], other=forms[other], h=h, v=v)
        sentence = sentence[0].upper() + sentence[1:]
        assert sentence not in pair_p
        pair_p[sentence] = 1 / (2 * len(T_PAIR) * 3 ** 4)
        total += pair_p[sentence]
        text = ". ".join(head) + ". " + sentence
        assert caption_bits(text, world=world) == pytest.approx(head_bits - math.log2(pair_p[sentence]), abs=1e-9)
    assert len(pair_p) == 486 and total == pytest.approx(1.0, abs=1e-12)


def test_caption_bits_rejects_other_levels_and_scores_impossible_texts_infinite():
    text = caption(SCENE, level=5, rng=0)
    with pytest.raises(ValueError, match="level-5"):
        caption_bits(caption(SCENE, level=4, rng=0))
    with pytest.raises(ValueError, match="matches no caption template"):
        caption_bits(text + " Hello there.")
    sentences = text.split(". ")
    swapped = ". ".join([sentences[0], sentences[1], sentences[3], sentences[2], *sentences[4:]])
    assert caption_bits(swapped) == math.inf  # objects out of the generator's order
    assert caption_bits(caption({**SCENE, "objects": SCENE["objects"][::-1]}, level=5, rng=0)) == math.inf
    off_grid = caption({**SCENE, "objects": [SCENE["objects"][0], {**SCENE["objects"][1], "x": 0.66}]}, level=5, rng=0)
    assert caption_bits(off_grid) == math.inf  # 66 percent lies on no jittered cell
    assert math.isfinite(caption_bits(text))
    wrong = re.sub(r"\ban? (\w+)", lambda m: ("a " if m.group(1)[0] in "aeiou" else "an ") + m.group(1), text, count=1)
    assert wrong != text and caption_bits(wrong) == math.inf  # parses, but the generator never writes that article


def test_mean_caption_bits_of_sampled_captions_is_the_exact_entropy():
    """Samples of the sampler (shapes.sample_scene, captions.caption), scored by the model: their mean
    -log2 q equals the entropy of q only when sampler and model agree (else it exceeds it by KL)."""
    world = {"max_objects": 2}
    model = world_model(world)
    # H(scene) = H(n) + Σ_n p(n) [H(bg, pair set | n) + n log2|sizes| + log2(9!/(9-n)!) + 2n log2(2J + 1)]
    pairs = list(product(model.colors, model.shapes))
    place = [{"size": "small", "x": 0.17, "y": 0.17}, {"size": "small", "x": 0.5, "y": 0.17}]
    h, choice_bits, p_coarse = 1.0, 0.0, {}
    for n in (1, 2):
        keys = [(bg, objs) for bg in model.backgrounds for objs in combinations(pairs, n)]
        log2p = np.array([scene_log2prob({"background": bg, "objects": [
            {"color": c, "shape": s, **place[k]} for k, (c, s) in enumerate(objs)]}, model) for bg, objs in keys])
        const = -1 - n * math.log2(3) - sum(math.log2(9 - k) for k in range(n)) - 2 * n * math.log2(15)
        p_set = 2.0 ** (log2p - const)  # p(bg, pair set | n)
        assert p_set.sum() == pytest.approx(1.0, abs=1e-9)
        for (bg, objs), p in zip(keys, p_set):
            key = (bg, tuple(sorted(c for c, _ in objs)))
            p_coarse[key] = p_coarse.get(key, 0.0) + 0.5 * p
        h += 0.5 * (-(p_set[p_set > 0] * np.log2(p_set[p_set > 0])).sum() - const - 1)
        choice_bits += 0.5 * (math.log2(len(T_LIST) * len(T_BACKGROUND)) + n * math.log2(len(T_COORD))
                              + (n - 1) * math.log2(2 * len(T_PAIR)))
    rng = np.random.default_rng(11)
    scenes = [sample_scene(rng, world=world) for _ in range(10000)]
    # plug-in check: frequencies of (background, colours) against the model's marginal (chi-square, E >= 5 pooled)
    seen = Counter((s["background"], tuple(sorted(o["color"] for o in s["objects"]))) for s in scenes)
    expected = {k: len(scenes) * p for k, p in p_coarse.items()}
    big = [k for k, e in expected.items() if e >= 5]
    observed = np.array([seen[k] for k in big] + [len(scenes) - sum(seen[k] for k in big)])
    want = np.array([expected[k] for k in big] + [len(scenes) - sum(expected[k] for k in big)])
    chi2, df = float(((observed - want) ** 2 / want).sum()), len(big)
    assert chi2 < df + 6 * math.sqrt(2 * df), (chi2, df)  # 153 on 189 df here; 2788 if types 4, 5 are never drawn
    scenes = scenes[:3000]
    texts = [caption(s, level=5, rng=i) for i, s in enumerate(scenes)]
    # the synonym draws' bits depend on the scene alone: subtract them, then compare with scene + template bits
    bits = np.array([caption_bits(t, world=world) - _mention_bits(t) for t in texts])
    se = bits.std(ddof=1) / math.sqrt(len(bits))
    assert abs(bits.mean() - (h + choice_bits)) < 4 * se, (bits.mean(), h + choice_bits, se)  # 36.70 vs 36.52 +- 0.19 here
    scene_bits = np.array([-scene_log2prob(s, model) for s in scenes])
    assert abs(scene_bits.mean() - h) < 4 * scene_bits.std(ddof=1) / math.sqrt(len(bits))
    # a sampler that ignored the types (independent attributes) would cost KL more: far outside the band
    flat = [sample_scene(rng, world={**world, "type_concentration": 1e4}) for _ in range(1000)]
    assert np.mean([-scene_log2prob(s, model) for s in flat]) > h + 1.0


def test_entropy_floor_is_bits_over_bytes():
    texts = [caption(SCENE, level=5, rng=i) for i in range(5)]
    want = sum(caption_bits(t) for t in texts) / sum(len(t.encode("utf-8")) for t in texts)
    assert entropy_floor_bpb(texts) == pytest.approx(want)
    assert entropy_floor_bpb(texts, world=world_model()) == pytest.approx(want)
    assert 0 < want < 1
    with pytest.raises(ValueError, match="non-empty list"):
        entropy_floor_bpb(texts[0])
