"""The zoo summary: margins of trained over untrained models, computed by hand on a small example."""

import pytest

from prh.evaluation.zoo_summary import language_competence, language_gate, main, zoo_metrics
from prh.io import read_json, write_json


def test_margins_match_a_hand_computation():
    vision = {
        "tasks": {"count": {"chance": 0.3}, "background": {"chance": 0.25}},
        "models": {
            "cnn_random": {"mean_accuracy": 0.40, "tasks": {"count": {"accuracy": 0.5}, "background": {"accuracy": 0.3}}},
            "vit_random": {"mean_accuracy": 0.45, "tasks": {"count": {"accuracy": 0.4}, "background": {"accuracy": 0.5}}},
            "cnn_sup": {"mean_accuracy": 0.70, "tasks": {"count": {"accuracy": 0.8}, "background": {"accuracy": 0.6}}},
        },
    }
    language = {"unigram": {"bpb": 4.4}, "floor": {"bpb": 0.2},
                "models": {m: {"bpb": b, "reducible_fraction": (4.4 - b) / 4.2}
                           for m, b in (("lm_0", 3.0), ("lm_100", 0.9), ("lm_400", 0.5))}}
    out = zoo_metrics(vision, language, untrained=["cnn_random", "vit_random", "lm_0"])
    assert out["vision"]["trained_minus_untrained"] == pytest.approx(0.70 - 0.45)
    assert out["vision"]["accuracy"]["cnn_sup"] == {"count": 0.8, "background": 0.6}
    assert out["vision"]["chance"] == {"count": 0.3, "background": 0.25}
    assert out["language"]["untrained_minus_trained_bpb"] == pytest.approx(3.0 - 0.5)
    assert out["language"]["unigram_minus_trained_bpb"] == pytest.approx(4.4 - 0.5)


def test_without_baselines_no_margin_is_invented():
    vision = {"tasks": {"t": {"chance": 0.5}}, "models": {"a": {"mean_accuracy": 0.6, "tasks": {"t": {"accuracy": 0.6}}}}}
    language = {"unigram": {"bpb": 4.0}, "floor": {"bpb": 0.5}, "models": {"lm": {"bpb": 1.0, "reducible_fraction": 6 / 7}}}
    out = zoo_metrics(vision, language, untrained=[])
    assert "trained_minus_untrained" not in out["vision"]
    assert "untrained_minus_trained_bpb" not in out["language"]
    assert out["language"]["unigram_minus_trained_bpb"] == pytest.approx(3.0)


PROBES = {"tasks": {"background": {}, "count": {}, "largest_color": {}},
          "models": {m: {"tasks": {"background": {"accuracy": b}, "count": {"accuracy": c}, "largest_color": {"accuracy": k}}}
                     for m, b, c, k in (("lm_0", 0.5, 0.4, 0.2), ("lm_100", 0.95, 0.7, 0.5),
                                        ("lm_1000", 0.95, 0.85, 0.61), ("lm2_1000", 0.99, 0.9, 0.7))}}
LANGUAGE = {"unigram": {"bpb": 2.0}, "floor": {"bpb": 0.5},
            "models": {m: {"bpb": b, "reducible_fraction": (2.0 - b) / 1.5, "steps": s}
                       for m, b, s in (("lm_0", 3.0, 0), ("lm_100", 1.2, 100), ("lm_1000", 0.8, 1000), ("lm2_1000", 0.7, 1000))}}
GATE = {"background": 0.9, "count": 0.8, "largest_color": 0.6}


def test_gate_judges_only_models_trained_long_enough():
    gate = language_gate(PROBES, LANGUAGE, thresholds=GATE, min_steps=1000)
    assert [m for m, r in gate["models"].items() if r["passed"]] == ["lm_1000", "lm2_1000"]
    assert gate["passed"] is True and gate["n_judged"] == 2  # lm_100 fails count but is not judged
    assert gate["models"]["lm_1000"] == {"background": 0.95, "count": 0.85, "largest_color": 0.61, "steps": 1000,
                                         "passed": True, "judged": True}
    strict = language_gate(PROBES, LANGUAGE, thresholds={**GATE, "largest_color": 0.65}, min_steps=1000)
    assert strict["passed"] is False  # lm_1000's 0.61 fails
    assert language_gate(PROBES, LANGUAGE, thresholds=GATE, min_steps=5000)["passed"] is None  # nobody judged
    with pytest.raises(ValueError, match="pair_distance"):
        language_gate(PROBES, LANGUAGE, thresholds={"pair_distance": 0.5}, min_steps=0)


def test_summary_cli_writes_gate_mc_and_competence(tmp_path):
    vision = {"tasks": {"t": {"chance": 0.5}}, "models": {"a": {"mean_accuracy": 0.6, "tasks": {"t": {"accuracy": 0.6}}}}}
    mc = {"models": {"lm_0": {"acc": 0.25}, "lm_100": {"acc": 0.5}, "lm_1000": {"acc": 0.8}}}
    for name, obj in (("v", vision), ("l", LANGUAGE), ("p", PROBES), ("mc", mc)):
        write_json(tmp_path / f"{name}.json", obj)
    main(["--vision", str(tmp_path / "v.json"), "--language", str(tmp_path / "l.json"),
          "--language-probes", str(tmp_path / "p.json"), "--mc", str(tmp_path / "mc.json"),
          "--gate", '{"background": 0.9, "count": 0.8, "largest_color": 0.6}', "--gate-min-steps", "1000",
          "--untrained", "lm_0", "--out", str(tmp_path / "m.json"), "--competence-out", str(tmp_path / "c.json")])
    competence = read_json(tmp_path / "c.json")
    assert competence["gate_passed"] is True
    assert competence["language_models"] == ["lm_100", "lm_1000", "lm2_1000"]  # lm_0 (untrained) is no unit
    assert competence["models"]["lm_100"] == {"reducible_fraction": pytest.approx(0.8 / 1.5), "neg_bits_per_byte": -1.2,
                                              "mc_accuracy": 0.5}
    out = read_json(tmp_path / "m.json")["language"]
    assert out["mc_accuracy"] == {"lm_0": 0.25, "lm_100": 0.5, "lm_1000": 0.8}
    assert out["gate"]["passed"] is True and out["floor_bpb"] == 0.5
    assert out["competence"]["lm_1000"] == {"reducible_fraction": pytest.approx(0.8), "neg_bits_per_byte": -0.8,
                                            "steps": 1000, "mc_accuracy": 0.8}
    assert out["competence"]["lm2_1000"]["mc_accuracy"] is None  # not scored: no value is invented
    assert language_competence(LANGUAGE, None)["lm_0"] == {"reducible_fraction": pytest.approx(-2 / 3),
                                                          "neg_bits_per_byte": -3.0, "steps": 0}
