"""The paper's model sets in params.yaml (issue 22, point 8): Fig 2's 78 vision models (PRH appendix C.1)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("repo", "revision", "modality", "n_params")   # workflow/schemas/paper.schema.yaml


def test_fig2_vision_set_accounts_for_the_papers_78_models_and_declares_every_hub_model():
    """Every one of the paper's 78 vision models is either a declared hub checkpoint in prh_fig2_vision,
    or listed in the composition file with why it has no hub id (never an invented one)."""
    import timm

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    comp = yaml.safe_load((ROOT / "workflow/resources/prh_fig2_vision.yaml").read_text())
    fig2 = cfg["model_sets"]["prh_fig2_vision"]
    groups = comp["groups"]
    assert comp["paper_count"] == 78 == sum(g["count"] for g in groups)   # appendix C.1: 17 + 1 + 11 + 49
    assert [g["count"] for g in groups] == [17, 1, 11, 49]
    assert fig2 == [m for g in groups for m in g["models"]], "prh_fig2_vision must list the groups' hub models in order"
    assert len(fig2) == len(set(fig2))
    models = cfg["paper"]["models"]
    for name in fig2:
        spec = models[name]
        assert all(spec.get(k) for k in REQUIRED), f"{name} lacks one of {REQUIRED}"
        assert spec["modality"] == "vision" and timm.is_model_pretrained(spec["repo"]), spec["repo"]
    for g in groups:
        assert len(g["models"]) <= g["count"] and g["source"]
        if len(g["models"]) < g["count"]:   # the rest: a reason, and where the weights were published if anywhere
            assert g["missing"]["reason"] and g["missing"]["count"] == g["count"] - len(g["models"])
    # Fig 2's competence bins and model map use it in the paper suite (convergence.vision_models)
    assert cfg["convergence"]["vision_models"] == {"offline": None, "paper": "prh_fig2_vision"}
