"""What the convergence rules read while Snakemake parses them; scipy- and torch-free.

``SLICES`` names the keys of the ``convergence`` block each command reads: its rule passes only
those, so editing e.g. ``platonic_sensitivity`` reruns the platonic reference, not Figs 2 and 3.
The commands fill a key left out with its schema default, so a slice must name every key its
command reads (tests/test_convergence.py checks that each key is read by a slice or the workflow).
"""

from __future__ import annotations

__all__ = ["SLICES", "CONFIG", "RELATIONAL_CONFIG", "WORKFLOW_KEYS", "COMPOSITION", "fig2_coverage"]

# command -> the keys of the `convergence` block it reads (workflow/schemas/convergence.schema.yaml documents each)
SLICES = {
    "run-convergence": ("solve_fraction", "bins", "seed", "min_umap_models", "n_neighbors", "preregistered", "amended"),
    "run-platonic": ("topk", "quantile", "platonic_sensitivity"),
}
# each command's slice (its rule's one --config argument, prh.slices): run-convergence's bins are per suite, so its
# rule passes the suite's edges as --bins; run-platonic also reads the world's kernel
CONFIG = {"run-convergence": {"convergence": tuple(k for k in SLICES["run-convergence"] if k != "bins")},
          "run-platonic": {"convergence": SLICES["run-platonic"], "world": ("kernel",)}}
# keys only the rules read (which models and datasets the jobs take)
WORKFLOW_KEYS = ("vision_models", "vtab_tasks", "relational")  # relational: zoo_language.smk reads it
# the relational test's keys of convergence.relational (prh relational-test; its rule's --config, prh.slices)
RELATIONAL_CONFIG = {"convergence.relational": ("alpha", "effect", "seed")}

# PRH Fig 2's 78 vision models by group, and which of them the paper suite loads (tests/test_model_sets.py checks it)
COMPOSITION = "workflow/resources/prh_fig2_vision.yaml"


def fig2_coverage(members: list[str], composition: str = COMPOSITION) -> dict:
    """Which of the paper's Fig 2 models a run's vision set holds, by group of ``composition``: ``{"paper_count",
    "n_present", "groups": [{"group", "count", "present": [names], "n_missing", "missing_reason"?,
    "architecture_differs"?, "note"?}], "not_in_paper": [members of no group]}``. run-convergence writes it into
    competence.json and metrics.json; Fig 2 (left) and its caption state it."""
    from pathlib import Path

    import yaml

    comp = yaml.safe_load(Path(composition).read_text())
    groups, known = [], set()
    for g in comp["groups"]:
        present = [m for m in g["models"] if m in members]
        known.update(g["models"])
        row = {"group": g["group"], "count": g["count"], "present": present, "n_missing": g["count"] - len(present)}
        if row["n_missing"]:
            row["missing_reason"] = (g.get("missing") or {}).get("reason", "not in this run's vision set")
        row.update({k: " ".join(str(g[k]).split()) for k in ("architecture_differs", "note") if g.get(k)})
        groups.append(row)
    return {"paper_count": comp["paper_count"], "n_present": sum(len(g["present"]) for g in groups),
            "groups": groups, "not_in_paper": [m for m in members if m not in known]}
