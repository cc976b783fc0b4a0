"""PRH Figure 4 (alignment vs downstream): the shapes-world multiple-choice task, its scoring, the statistics, the plot."""

import collections
import json
import math

import numpy as np
import pytest
import torch
from tiny_models import save_encoder, save_language_model

from prh.checks import check_config
from prh.config import load
from prh.data.captions import caption, captions, parse_caption, scene_facts
from prh.data.shapes import sample_scene
from prh.evaluation.likelihood import choice_logprobs, mc_scores
from prh.io import read_json, write_json, write_jsonl
from prh.models.loaders import count_params, load_language_model
from prh.plots.downstream import plot_downstream
from prh.studies.downstream.run import (
    figure4,
    read_published_scores,
    run_figure4,
    strongest_vision_model,
)
from prh.studies.downstream.mc_items import build_items, contradictions


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(7)
    scenes = [sample_scene(rng) for _ in range(90)]
    texts = [caption(s, level=5, rng=np.random.default_rng([7, i])) for i, s in enumerate(scenes)]
    return scenes, texts


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lms")
    return {kind: save_language_model(kind, root / kind) for kind in ("gpt2", "bloom")} | {
        "bert": save_encoder(root / "bert")}


# ---------------------------------------------------------------- the items


def test_items_are_well_formed_and_each_distractor_contradicts_the_scene(world):
    scenes, texts = world
    items = build_items(scenes, texts, n_items=24, n_choices=4, seed=0)
    assert collections.Counter(it["label"] for it in items) == {0: 6, 1: 6, 2: 6, 3: 6}  # balanced positions
    assert collections.Counter(it["kind"] for it in items) == {"entity": 8, "relation": 8, "region": 8}
    assert len({it["scene"] for it in items}) == 24  # one item per scene
    for it in items:
        facts = scene_facts(scenes[it["scene"]], level=5)
        ends = it["endings"]
        assert len(ends) == 4 and len(set(ends)) == 4
        true = [i for i, e in enumerate(ends) if parse_caption(it["context"] + e) <= facts]
        assert true == [it["label"]]  # exactly one ending agrees with the scene
        assert texts[it["scene"]].startswith(it["context"] + ends[it["label"]])  # it is the caption's own text
        for i, e in enumerate(ends):
            assert len(e.split()) == len(ends[it["label"]].split())  # one template, one slot changed
            changed = [a != b for a, b in zip(e.split(), ends[it["label"]].split())]
            assert sum(changed) <= (1 if it["kind"] == "entity" else 2)  # relation: h and / or v; region: x, y
            if i != it["label"]:
                assert contradictions(it["context"] + e)  # refuted by the context itself
    assert contradictions(items[0]["context"] + items[0]["endings"][items[0]["label"]]) == []


def test_items_are_deterministic_by_seed_and_validate_inputs(world):
    scenes, texts = world
    a = build_items(scenes, texts, n_items=12, seed=3)
    assert a == build_items(scenes, texts, n_items=12, seed=3)
    assert a != build_items(scenes, texts, n_items=12, seed=4)
    two = build_items(scenes, texts, n_items=10, n_choices=2, seed=0)
    assert all(len(it["endings"]) == 2 for it in two) and collections.Counter(it["label"] for it in two) == {0: 5, 1: 5}
    with pytest.raises(ValueError, match="n_choices"):
        build_items(scenes, texts, n_items=4, n_choices=3)
    with pytest.raises(ValueError, match="n_items"):
        build_items(scenes, texts, n_items=500)
    with pytest.raises(ValueError, match="kinds"):
        build_items(scenes, texts, n_items=4, kinds=("colour",))
    with pytest.raises(ValueError, match=r"texts\[\d+\] does not state"):
        build_items(scenes, texts[1:] + texts[:1], n_items=4)


def test_contradictions_hand_example():
    ctx = ("Two objects: a red circle and a blue star. The red circle is large, sits in the upper left and is "
           "centred at (20, 20). The blue star is small, sits in the lower right and is centred at (80, 80).")
    assert contradictions(ctx + " The red circle is above and to the left of the blue star.") == []
    assert contradictions(ctx + " The red circle is above and to the right of the blue star.")
    assert contradictions(ctx + " The green circle is above and to the left of the blue star.")
    wrong_cell = ctx.replace("sits in the upper left", "sits in the lower left")
    assert contradictions(wrong_cell) and not contradictions(ctx)
    # a centre on a cell border (33.4% is the middle column, 33 as a whole percent) is no contradiction
    assert not contradictions("One object: a red circle. The red circle is large, sits in the centre and is "
                              "centred at (33, 50).")


# ---------------------------------------------------------------- scoring


CONTEXTS = ["a red cube to the left of", "two purple spheres on a", "the green cone is big and sits"]
ENDINGS = [[" a small blue ball", " a grey background", " cube"],
           [" grey background", " small blue ball and a cone", " sphere"],
           [" above the yellow cylinder", " on a", " café naïve"]]


def _hand_logprob(model, tok, context, ending) -> float:
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    c, e = tok(context, add_special_tokens=False).input_ids, tok(ending, add_special_tokens=False).input_ids
    ids = torch.tensor([[start] + c + e])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return float(logp.gather(1, ids[0, 1:, None])[-len(e):].sum())


@pytest.mark.parametrize("kind", ["gpt2", "bloom"])
def test_choice_logprobs_equal_hand_computation_and_ignore_batching(lm_dirs, kind):
    model, tok = load_language_model(lm_dirs[kind])
    got = choice_logprobs(model, tok, CONTEXTS, ENDINGS, batch_size=1)
    want = [[_hand_logprob(model, tok, c, e) for e in ends] for c, ends in zip(CONTEXTS, ENDINGS)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for side in ("left", "right"):
        tok.padding_side = side
        np.testing.assert_allclose(choice_logprobs(model, tok, CONTEXTS, ENDINGS, batch_size=4), got, atol=1e-5)
    # lm-evaluation-harness: a context's trailing space moves to its ending
    moved = choice_logprobs(model, tok, [c + " " for c in CONTEXTS], [[e[1:] for e in ends] for ends in ENDINGS])
    np.testing.assert_allclose(moved, got, atol=1e-5)
    assert got.shape == (3, 3) and np.all(got < 0)
    with pytest.raises(ValueError, match="same length"):
        choice_logprobs(model, tok, CONTEXTS, [ENDINGS[0], ENDINGS[1], ENDINGS[2][:2]])


def test_acc_and_acc_norm_hand_example():
    lp = [[-1.0, -2.0, -3.0], [-6.0, -3.0, -4.0]]
    endings = [["a", "bb", "ccc"], ["aaaaaa", "b", "cccc"]]
    # acc: argmax (0, 1) vs labels (0, 0) -> 1/2; per byte: (-1, -1, -1) tie -> 0, (-1, -3, -1) -> 0 -> 2/2
    assert mc_scores(lp, endings, [0, 0]) == {"acc": 0.5, "acc_norm": 1.0}
    assert mc_scores(lp, endings, [2, 1]) == {"acc": 0.5, "acc_norm": 0.0}


def _write_dataset(path, world, n):
    scenes, _ = world
    write_jsonl(path / "scenes.jsonl", [{"id": i, "scene": s} for i, s in enumerate(scenes[:n])])
    write_jsonl(path / "captions.jsonl", [{"id": i, "texts": captions(s, seed=i)} for i, s in enumerate(scenes[:n])])


def test_downstream_mc_cli_scores_causal_lms_and_skips_masked_ones(lm_dirs, world, tmp_path):
    from prh.cli import main
    from prh.studies.downstream.mc_items import load_items

    _write_dataset(tmp_path, world, 40)
    out = tmp_path / "mc.json"
    main(["score-mc", "--data", str(tmp_path), "--models", str(lm_dirs["gpt2"]), str(lm_dirs["bert"]),
          "--names", "tiny_gpt2", "tiny_bert", "--out", str(out), "--n-items", "12", "--batch-size", "5",
          "--no-progress"])
    r = read_json(out)
    assert [s["model"] for s in r["skipped"]] == ["tiny_bert"] and list(r["models"]) == ["tiny_gpt2"]
    items = load_items(tmp_path, n_items=12, seed=0)  # the CLI's defaults: 4 choices, seed 0
    model, tok = load_language_model(lm_dirs["gpt2"])  # 128 positions: the long captions are left-truncated
    lp = choice_logprobs(model, tok, [i["context"] for i in items], [i["endings"] for i in items])
    want = mc_scores(lp, [i["endings"] for i in items], [i["label"] for i in items])
    m = r["models"]["tiny_gpt2"]
    assert (m["acc"], m["acc_norm"], m["n_items"]) == (want["acc"], want["acc_norm"], 12)
    assert m["n_params"] == count_params(model) and sum(k["n"] for k in m["by_kind"].values()) == 12
    assert r["settings"]["chance"] == 0.25 and r["task"].startswith("HellaSwag-style")


# ---------------------------------------------------------------- Figure 4


CROSS = {"settings": {"metric": "mutual_knn", "topk": 10}, "x_names": ["a", "b", "c", "d", "e"],
         "y_names": ["v1", "v2"], "scores": [[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4], [0.5, 0.5]]}
# the `prh probe` format: per-task accuracies and their mean
PROBES = {"models": {"v1": {"tasks": {"t": {"accuracy": 0.9}, "u": {"accuracy": 0.1}}, "mean_accuracy": 0.5},
                     "v2": {"tasks": {"t": {"accuracy": 0.6}, "u": {"accuracy": 0.6}}, "mean_accuracy": 0.6}}}


def test_strongest_vision_is_best_mean_probe_accuracy():
    assert strongest_vision_model(PROBES) == "v2"
    with pytest.raises(ValueError, match="probe"):
        strongest_vision_model({"models": {}})


def test_figure4_perfect_linear_example():
    down = {m: {"hellaswag": 2 * a + 1, "gsm8k": 10 * a * a} for m, a in zip("abcd", [0.1, 0.2, 0.3, 0.4])}
    down["e"] = {"hellaswag": None, "gsm8k": 2.5}
    down["zz"] = {"hellaswag": 1.0, "gsm8k": 1.0}  # no alignment row
    bpb = {"a": 1.0, "b": 0.8, "c": 0.9, "d": 0.5, "e": 0.7}  # 1 - bpb: 0, .2, .1, .5, .3
    r = figure4(downstream=down, cross_alignment=CROSS, strongest_vision="v2", bpb=bpb, n_params={"a": 7})
    hs, gsm = r["tasks"]["hellaswag"], r["tasks"]["gsm8k"]
    assert [p["model"] for p in hs["points"]] == list("abcd") and hs["missing"] == ["e"]
    assert [p["alignment"] for p in hs["points"]] == [0.1, 0.2, 0.3, 0.4]
    c = hs["correlations"]
    assert c["pearson_r"] == pytest.approx(1.0) and c["spearman_r"] == pytest.approx(1.0) and c["n"] == 4
    assert hs["fit"]["slope"] == pytest.approx(2.0) and hs["fit"]["intercept"] == pytest.approx(1.0)
    assert gsm["correlations"]["spearman_r"] == pytest.approx(1.0) and gsm["correlations"]["pearson_r"] < 1
    assert {p["model"]: p["lm_rank"] for p in gsm["points"]} == {"a": 1, "c": 2, "b": 3, "e": 4, "d": 5}
    assert hs["points"][0]["n_params"] == 7 and hs["points"][1]["n_params"] is None
    assert r["not_aligned"] == ["zz"] and r["n_ranked"] == 5
    with pytest.raises(ValueError, match="strongest_vision"):
        figure4(downstream=down, cross_alignment=CROSS, strongest_vision="dinov2", bpb=bpb, n_params={})


CSV = """# transcribed offline: verify
model,hellaswag,gsm8k,hellaswag_setting,gsm8k_setting,origin,source
a,20.0,1.5,0-shot,maj@1,published,"Paper A, Table 3"
# a comment between rows
b,40,,0-shot,,lm-eval-harness,Paper B
c,,,,,,
d,80,6,0-shot,maj@1,published,Paper D
"""


def test_published_scores_csv_loader(tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text(CSV)
    rows = read_published_scores(path)
    assert list(rows) == ["a", "b", "c", "d"]
    assert rows["a"] == {"hellaswag": 20.0, "gsm8k": 1.5, "hellaswag_setting": "0-shot", "gsm8k_setting": "maj@1",
                         "origin": "published", "source": "Paper A, Table 3"}
    assert rows["b"]["gsm8k"] is None and rows["c"]["hellaswag"] is None
    path.write_text(CSV.replace("gsm8k_setting,", "gsm8k_shots,"))
    with pytest.raises(ValueError, match="columns"):
        read_published_scores(path)
    path.write_text(CSV.replace("20.0", "twenty"))
    with pytest.raises(ValueError, match="not a number"):
        read_published_scores(path)


def test_csv_loader_rejects_a_score_without_its_source_setting_or_origin(tmp_path):
    """Every number of Fig 4 names where it comes from and how it was measured."""
    path = tmp_path / "scores.csv"
    for row, missing in (("x,50,,0-shot,,published,", "source"), ("x,50,,,,published,Paper X", "hellaswag_setting"),
                         ("x,,7,,,published,Paper X", "gsm8k_setting"), ("x,50,,0-shot,,,Paper X", "origin"),
                         ("x,50,,0-shot,,guessed,Paper X", "origin")):
        path.write_text(CSV + row + "\n")
        with pytest.raises(ValueError, match=missing):
            read_published_scores(path)
    path.write_text(CSV + "x,,,,,,\n")  # an empty row (no published number found) stays allowed
    assert read_published_scores(path)["x"]["hellaswag"] is None


def test_shipped_paper_csv_names_every_fig4_language_model(repo_root):
    rows = read_published_scores(repo_root / "workflow/resources/paper_downstream_scores.csv")
    cfg = check_config(load(repo_root / "params.yaml"))  # the schema's defaults filled in, as the workflow sees it
    sets, fig4 = cfg["model_sets"], cfg["downstream"]["language_models"]["paper"]
    # PRH appendix C.2: Fig 4 adds OLMo, LLaMA 3, Gemma and Mistral/Mixtral to the BLOOMZ / OpenLLaMA / LLaMA
    # families (the reference code's `custom` set: all 20 LMs, aligned to DINOv2 ViT-g)
    assert set(sets[fig4]) == set(sets["prh_val_language"]) | set(sets["prh_test_language"]) == set(rows)
    assert cfg["downstream"]["strongest_vision"] in sets[cfg["downstream"]["vision_models"]["paper"]]
    scored = [m for m, r in rows.items() if r["hellaswag"] is not None or r["gsm8k"] is not None]
    assert len(scored) >= 8 and all(rows[m]["source"] and rows[m]["origin"] for m in scored)


def _out(folder):
    """The files run-downstream writes, under the workflow's names."""
    return {"downstream": str(folder / "downstream.json"), "metrics": str(folder / "metrics.json")}


def test_run_figure4_refuses_scored_models_without_alignment(tmp_path):
    """A model with a published score but no alignment row would silently drop out of Fig 4."""
    write_json(tmp_path / "cross.json", CROSS)
    (tmp_path / "scores.csv").write_text(CSV + "zz,55,,10-shot,,lm-eval-harness,Leaderboard\n")
    with pytest.raises(ValueError, match="zz"):
        run_figure4(cross_alignment=str(tmp_path / "cross.json"), scores=str(tmp_path / "scores.csv"),
                    strongest_vision="v2", language=[], out=_out(tmp_path / "out"))


def test_run_figure4_from_csv_and_from_offline_json_then_plot(tmp_path):
    from prh.cli import main

    write_json(tmp_path / "cross.json", CROSS)
    (tmp_path / "scores.csv").write_text(CSV)
    for m, bpb in zip("abcd", [0.9, 0.8, 0.7, 0.6]):  # `prh score-lm` JSONs
        write_json(tmp_path / f"{m}.json", {"model": m, "bpb": bpb, "lm_score": 1 - bpb, "n_params": 10 ** (6 + "abcd".index(m))})
    main(["run-downstream", "--cross-alignment", str(tmp_path / "cross.json"), "--scores", str(tmp_path / "scores.csv"),
          "--strongest-vision", "v2", "--language", *[str(tmp_path / f"{m}.json") for m in "abcd"],
          "--downstream", str(tmp_path / "paper" / "downstream.json"), "--metrics", str(tmp_path / "paper" / "metrics.json")])
    assert sorted(p.name for p in (tmp_path / "paper").iterdir()) == ["downstream.json", "metrics.json"]
    metrics = read_json(tmp_path / "paper" / "metrics.json")
    assert metrics["strongest_vision"] == "v2"
    assert metrics["tasks"]["hellaswag"]["n"] == 3 and metrics["tasks"]["gsm8k"]["n"] == 2  # a, b, d / a, d
    assert metrics["tasks"]["hellaswag"]["spearman_r"] == pytest.approx(1.0)
    data = read_json(tmp_path / "paper" / "downstream.json")
    assert data["tasks"]["gsm8k"]["missing"] == ["b", "c", "e"] and data["provenance"]["a"]["source"] == "Paper A, Table 3"
    assert data["tasks"]["hellaswag"]["points"][2]["n_params"] == 10 ** 9

    mc = {"task": "t", "settings": {"chance": 0.25},
          "models": {m: {"acc": a, "acc_norm": a / 2, "n_params": 5} for m, a in zip("abc", [0.3, 0.5, 0.4])},
          "skipped": [{"model": "e", "reason": "masked LM"}]}
    write_json(tmp_path / "mc.json", mc)
    write_json(tmp_path / "probes.json", PROBES)
    write_json(tmp_path / "language.json", {"models": {"a": {"bpb": 1.0}, "b": {"bpb": 0.5, "n_params": 9}}})
    m = run_figure4(cross_alignment=str(tmp_path / "cross.json"), scores=str(tmp_path / "mc.json"),
                    probes=str(tmp_path / "probes.json"), language=[str(tmp_path / "language.json")],
                    out=_out(tmp_path / "offline"))
    assert list(m) == ["shapes_mc_acc_norm", "shapes_mc_acc"] and m["shapes_mc_acc"]["n"] == 3
    off = read_json(tmp_path / "offline" / "downstream.json")
    pts = {p["model"]: p for p in off["tasks"]["shapes_mc_acc"]["points"]}
    assert pts["b"]["n_params"] == 9 and pts["a"]["n_params"] == 5 and pts["c"]["lm_rank"] is None
    assert off["provenance"]["skipped"] == mc["skipped"]

    paths = plot_downstream(off, tmp_path / "fig" / "fig04.pdf")  # from the JSON alone
    assert all(p.exists() and p.stat().st_size > 1000 for p in paths)
    main(["plot", "downstream_fig04", "--input", f"downstream={tmp_path / 'paper' / 'downstream.json'}",
          "--out", str(tmp_path / "fig" / "paper.pdf")])
    assert (tmp_path / "fig" / "paper.pdf").exists() and (tmp_path / "fig" / "paper.png").exists()
    with pytest.raises(ValueError, match="exactly one"):
        run_figure4(cross_alignment=str(tmp_path / "cross.json"), scores=str(tmp_path / "mc.json"),
                    language=[str(tmp_path / "language.json")], out=_out(tmp_path / "x"))
    assert math.isfinite(json.loads((tmp_path / "offline" / "metrics.json").read_text())["tasks"]["shapes_mc_acc"]["spearman_r"])
