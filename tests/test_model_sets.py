"""The paper's model sets in params.yaml: Fig 2's 78 vision models (PRH appendix C.1)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("repo", "revision", "modality", "n_params")   # workflow/schemas/paper.schema.yaml


def test_fig2_vision_set_accounts_for_the_papers_78_models_and_declares_every_hub_model():
    """Every one of the paper's 78 vision models is either a declared checkpoint in prh_fig2_vision (a hub id, or
    the plain-URL and seeded ones, declared in workflow/resources/checkpoints.yaml), or listed in the
    composition file with why it is missing (never an invented id)."""
    import timm

    from prh.models.checkpoints import resolve_checkpoint

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
        assert spec["modality"] == "vision" and spec["n_params"] > 0
        if spec.get("source", "hub") == "hub":
            assert all(spec.get(k) for k in REQUIRED), f"{name} lacks one of {REQUIRED}"
            assert timm.is_model_pretrained(spec["repo"]), spec["repo"]
        else:  # on no hub: its declaration resolves (architecture, URL and layout, or seed)
            assert resolve_checkpoint(cfg, name)["arch"] in ("resnet50", "smallalexnet")
    for g in groups:
        assert len(g["models"]) <= g["count"] and g["source"]
        if len(g["models"]) < g["count"]:   # the rest: a reason, and where the weights were published if anywhere
            assert g["missing"]["reason"] and g["missing"]["count"] == g["count"] - len(g["models"])
    # Fig 2's competence bins and model map use it in the paper suite (convergence.vision_models)
    from prh.checks import check_config

    assert check_config(cfg)["convergence"]["vision_models"] == {"offline": None, "paper": "prh_fig2_vision"}


def test_fig2_plans_43_of_the_78_and_its_coverage_says_which_and_why_not():
    """The 17 ViTs, the seeded random ResNet-50 and 25 published encoders; Fig 2's outputs state which
    of the 78 are present, per group, and flag the SmallAlexNets standing for the paper's ResNet-18s."""
    from prh.studies.convergence.design import fig2_coverage

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    cov = fig2_coverage(cfg["model_sets"]["prh_fig2_vision"], ROOT / "workflow/resources/prh_fig2_vision.yaml")
    assert cov["paper_count"] == 78 and cov["n_present"] == 43 and cov["not_in_paper"] == []
    rows = {g["group"]: g for g in cov["groups"]}
    assert [len(rows[g]["present"]) for g in ("vit", "resnet50_random", "resnet50_contrastive",
                                              "resnet18_align_uniform")] == [17, 1, 11, 14]
    assert rows["resnet18_align_uniform"]["n_missing"] == 35 and rows["resnet18_align_uniform"]["missing_reason"]
    assert "SmallAlexNet" in rows["resnet18_align_uniform"]["architecture_differs"]
    assert "architecture_differs" not in rows["resnet50_contrastive"] and "Places-365" in rows["resnet50_contrastive"]["note"]
    replay = yaml.safe_load((ROOT / "presets/replay.yaml").read_text())["model_sets"]["prh_fig2_vision"]
    small = fig2_coverage(replay, ROOT / "workflow/resources/prh_fig2_vision.yaml")
    assert small["n_present"] == len(replay) == 5 and small["groups"][0]["n_missing"] == 15
