"""Caption density (PRH Fig 9): level statistics, the trend, and the figure from JSON alone."""

import json

import numpy as np
import pytest

from prh.data.captions import caption
from prh.data.shapes import sample_scene, world_features
from prh.io import read_json, save_features
from prh.plots.density import plot_density
from prh.studies.density.run import (
    density_trend,
    level_summary,
    level_word_counts,
    run_density,
)


def _out(folder):
    """The files run-density writes, under the workflow's names."""
    return {"density": str(folder / "density.json"), "metrics": str(folder / "metrics.json")}


def _captions(path, texts, num_words=None):
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t[-1], "texts": t, **({"num_words": num_words} if num_words else {})}) + "\n")
    return str(path)


def test_level_word_counts_and_labels(tmp_path):
    p = _captions(tmp_path / "a.jsonl", [["a b", "a b c d"], ["a b c d", "a b c d e f"]])
    assert level_word_counts(p) == ([3.0, 5.0], ["level 0", "level 1"])
    q = _captions(tmp_path / "b.jsonl", [["x y", "x y z w v"]], num_words=[2])
    assert level_word_counts(q)[1] == ["2 words", "dense"]
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": 0, "text": "no levels"}) + "\n")
    with pytest.raises(ValueError, match="texts"):
        level_word_counts(tmp_path / "c.jsonl")


def test_level_summary_hand_example():
    s = level_summary(np.array([[0.1, 0.3], [0.5, 0.7]]))  # LM means 0.2 and 0.6
    assert s["mean"] == pytest.approx(0.4)
    assert s["per_language"] == pytest.approx([0.2, 0.6])
    assert s["std"] == pytest.approx(np.std([0.2, 0.6], ddof=1))


def test_density_trend_rising_and_falling():
    up = [np.full((3, 2), v) + np.arange(3)[:, None] * 0.01 for v in (0.1, 0.2, 0.4)]
    t = density_trend(words=[4, 8, 16], tables=up)
    assert t["spearman_r"] == pytest.approx(1.0)
    assert t["slope_per_doubling"] == pytest.approx(np.polyfit([2, 3, 4], [np.mean(a) for a in up], 1)[0])
    assert t["lm_increase"] == 3 and t["n_language"] == 3
    down = density_trend(words=[4, 8, 16], tables=up[::-1])
    assert down["spearman_r"] == pytest.approx(-1.0) and down["lm_increase"] == 0
    with pytest.raises(ValueError, match="levels"):
        density_trend(words=[4], tables=up[:1])


def test_run_density_captions_of_the_world_and_figure(tmp_path):
    """Denser levels carry more of the scene: 'language' features that are the world
    kernel's features plus noise that shrinks with the level align better with a
    'vision' model that sees the world, and with the world kernel itself."""
    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(60)]
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"id": i, "scene": s}) + "\n" for i, s in enumerate(scenes)))
    texts = [[caption(s, level=lv, rng=i) for lv in (0, 3, 5)] for i, s in enumerate(scenes)]
    caps = _captions(tmp_path / "captions.jsonl", texts)
    world = world_features(scenes).astype(np.float32)
    noise = np.random.default_rng(1)
    vision = tmp_path / "v.safetensors"
    save_features(vision, np.stack([world + 0.05 * noise.normal(size=world.shape)], axis=1).astype(np.float32),
                  {"model": "v"})
    lang = []
    for level, sigma in enumerate((1.0, 0.3, 0.05)):
        for name in ("l1", "l2"):
            path = tmp_path / f"{name}_{level}.safetensors"
            feats = world + sigma * noise.normal(size=world.shape)
            save_features(path, feats[:, None, :].astype(np.float32), {"model": name})
            lang.append(str(path))
    metrics = run_density(captions=caps, language_names=["l1", "l2"], language_features=lang, vision_names=["v"],
                          vision_features=[str(vision)], out=_out(tmp_path / "exp"), scenes=str(tmp_path / "scenes.jsonl"),
                          topk=5, quantile=1.0)
    data = read_json(tmp_path / "exp" / "density.json")
    means = [lv["mean"] for lv in data["levels"]]
    assert means[0] < means[1] < means[2]
    assert metrics["trend"]["spearman_r"] == pytest.approx(1.0) and metrics["trend"]["lm_increase"] == 2
    assert [lv["world_mean"] for lv in data["levels"]] == sorted(lv["world_mean"] for lv in data["levels"])
    assert data["levels"][0]["words"] < data["levels"][2]["words"]
    sub = run_density(captions=caps, language_names=["l1", "l2"], language_features=lang[:2] + lang[4:],
                      vision_names=["v"], vision_features=[str(vision)], out=_out(tmp_path / "sub"), levels=[0, 2],
                      topk=5, quantile=1.0)
    assert sub["level_means"] == {"level 0": means[0], "level 2": means[2]}
    with pytest.raises(ValueError, match="increasing distinct"):
        run_density(captions=caps, language_names=["l1", "l2"], language_features=lang[:4], vision_names=["v"],
                    vision_features=[str(vision)], out=_out(tmp_path / "bad"), levels=[2, 0])
    with pytest.raises(ValueError, match="needs 6 files"):
        run_density(captions=caps, language_names=["l1", "l2"], language_features=lang[:4], vision_names=["v"],
                    vision_features=[str(vision)], out=_out(tmp_path / "bad"))
    paths = plot_density(read_json(tmp_path / "exp" / "density.json"), tmp_path / "fig" / "fig09.pdf")
    assert all(p.exists() and p.stat().st_size > 1000 for p in paths)
    # the command writes the two paths it is given (explicit names, no folder)
    from prh.studies.density.run import main

    main(["--captions", caps, "--language-names", "l1", "l2", "--language-features", *lang, "--vision-names", "v",
          "--vision-features", str(vision), "--topk", "5", "--quantile", "1.0", "--density", str(tmp_path / "cli" / "d.json"),
          "--metrics", str(tmp_path / "cli" / "m.json")])
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["d.json", "m.json"]
    assert read_json(tmp_path / "cli" / "m.json")["trend"] == metrics["trend"]
    with pytest.raises(ValueError, match=r"run-density: no path for \['metrics'\]"):
        run_density(captions=caps, language_names=["l1", "l2"], language_features=lang, vision_names=["v"],
                    vision_features=[str(vision)], out={"density": str(tmp_path / "x.json")}, topk=5, quantile=1.0)


def test_run_density_uses_the_first_images_of_summarised_captions(tmp_path):
    """`max_items` summarises the first n captions; the vision features of the whole dataset
    are then cut to their first n rows, giving the same numbers as features of n images."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(40, 1, 16)).astype(np.float32)
    caps = _captions(tmp_path / "captions.jsonl", [["a b", "a b c d"]] * 30)
    lang = []
    for level in range(2):
        path = tmp_path / f"l_{level}.safetensors"
        save_features(path, (base[:30] + rng.normal(size=(30, 1, 16)) * (1 - 0.5 * level)).astype(np.float32), {"model": "l"})
        lang.append(str(path))
    full, cut = tmp_path / "v_full.safetensors", tmp_path / "v_cut.safetensors"
    save_features(full, base, {"model": "v"})
    save_features(cut, base[:30], {"model": "v"})
    kw = dict(captions=caps, language_names=["l"], language_features=lang, vision_names=["v"], topk=5, quantile=1.0)
    a = run_density(vision_features=[str(full)], out=_out(tmp_path / "a"), **kw)
    b = run_density(vision_features=[str(cut)], out=_out(tmp_path / "b"), **kw)
    assert a["level_means"] == b["level_means"]
    assert read_json(tmp_path / "a" / "density.json")["settings"]["n"] == 30


def test_figure_of_the_paper_suite_path(tmp_path):
    """Summarised captions (num_words recorded, no world kernel): one panel, labelled by words."""
    caps = _captions(tmp_path / "c.jsonl", [["a b", "a b c d e", "a b c d e f g h i j"]] * 12, num_words=[2, 5])
    words, labels = level_word_counts(caps)
    assert labels == ["2 words", "5 words", "dense"]
    tables = [np.full((2, 3), v) + np.array([[0.0], [0.01]]) for v in (0.1, 0.2, 0.3)]
    data = {"settings": {"metric": "mutual_knn", "topk": 10},
            "levels": [{"level": i, "label": lb, "words": w, **level_summary(t)}
                       for i, (lb, w, t) in enumerate(zip(labels, words, tables))],
            "trend": density_trend(words=words, tables=tables)}
    paths = plot_density(data, tmp_path / "fig09.pdf")
    assert all(p.stat().st_size > 1000 for p in paths)
