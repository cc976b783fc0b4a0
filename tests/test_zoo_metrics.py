"""The zoo summary: margins of trained over untrained models, computed by hand on a small example."""

import pytest

from prh.evaluation.zoo_summary import zoo_metrics


def test_margins_match_a_hand_computation():
    vision = {
        "tasks": {"count": {"chance": 0.3}, "background": {"chance": 0.25}},
        "models": {
            "cnn_random": {"mean_accuracy": 0.40, "tasks": {"count": {"accuracy": 0.5}, "background": {"accuracy": 0.3}}},
            "vit_random": {"mean_accuracy": 0.45, "tasks": {"count": {"accuracy": 0.4}, "background": {"accuracy": 0.5}}},
            "cnn_sup": {"mean_accuracy": 0.70, "tasks": {"count": {"accuracy": 0.8}, "background": {"accuracy": 0.6}}},
        },
    }
    language = {"unigram": {"bpb": 4.4}, "models": {"lm_0": {"bpb": 3.0}, "lm_100": {"bpb": 0.9}, "lm_400": {"bpb": 0.5}}}
    out = zoo_metrics(vision, language, untrained=["cnn_random", "vit_random", "lm_0"])
    assert out["vision"]["trained_minus_untrained"] == pytest.approx(0.70 - 0.45)
    assert out["vision"]["accuracy"]["cnn_sup"] == {"count": 0.8, "background": 0.6}
    assert out["vision"]["chance"] == {"count": 0.3, "background": 0.25}
    assert out["language"]["untrained_minus_trained_bpb"] == pytest.approx(3.0 - 0.5)
    assert out["language"]["unigram_minus_trained_bpb"] == pytest.approx(4.4 - 0.5)


def test_without_baselines_no_margin_is_invented():
    vision = {"tasks": {"t": {"chance": 0.5}}, "models": {"a": {"mean_accuracy": 0.6, "tasks": {"t": {"accuracy": 0.6}}}}}
    language = {"unigram": {"bpb": 4.0}, "models": {"lm": {"bpb": 1.0}}}
    out = zoo_metrics(vision, language, untrained=[])
    assert "trained_minus_untrained" not in out["vision"]
    assert "untrained_minus_trained_bpb" not in out["language"]
    assert out["language"]["unigram_minus_trained_bpb"] == pytest.approx(3.0)
