"""The one verdict engine (prh.claims), the studies' manifests and the claims ledger."""

from __future__ import annotations

import json
import math

import pytest

from prh.claims import (LABELS, PROVISIONAL, correlation_row, correlation_verdict, interval_verdict, replication,
                        verdict)
from prh.errors import UsageError
from prh.studies import ledger as L


def test_verdict_reaches_every_label():
    assert verdict(True) == "reproduced"
    assert verdict(False) == "not reproduced"
    assert verdict(True, conclusive=False) == verdict(False, conclusive=False) == "inconclusive"
    assert verdict(None) == verdict(True, testable=False) == "not testable"
    assert verdict(None, conclusive=False) == "not testable"  # a rule that cannot fire is not "inconclusive"


@pytest.mark.parametrize("lo, hi, label", [
    (0.01, 0.05, "reproduced"),
    (0.0, 0.05, "inconclusive"),  # lo must be above 0, not at it
    (-0.03, 0.01, "not reproduced"),
    (-0.03, 0.02, "inconclusive"),  # hi at the margin: an effect as large as the margin is not excluded
    (-0.03, 0.0199, "not reproduced"),
    (-0.01, 0.04, "inconclusive"),
    (None, None, "not testable"),
])
def test_beats_boundaries(lo, hi, label):
    assert interval_verdict("beats", lo, hi, 0.02) == label


@pytest.mark.parametrize("lo, hi, label", [
    (-0.01, 0.015, "reproduced"),
    (-0.02, 0.015, "inconclusive"),  # lo at -margin: not inside
    (0.02, 0.05, "not reproduced"),  # wholly at or beyond the margin
    (0.0199, 0.05, "inconclusive"),
    (-0.05, -0.02, "not reproduced"),
    (-0.01, 0.05, "inconclusive"),
    (0.5, None, "not testable"),
])
def test_matches_boundaries(lo, hi, label):
    assert interval_verdict("matches", lo, hi, 0.02) == label


def test_interval_kind_is_checked():
    with pytest.raises(ValueError, match="kind="):
        interval_verdict("exceeds", 0, 1, 0.02)


@pytest.mark.parametrize("r, p, n, label", [
    (0.5, 0.01, 10, "reproduced"),
    (0.5, 0.05, 10, "not reproduced"),  # p must be below alpha
    (-0.5, 0.01, 10, "not reproduced"),
    (0.0, 0.01, 10, "not reproduced"),
    (0.9, 0.001, 3, "not testable"),  # the exact null's smallest two-sided p at n = 3: 2/6
    (1.0, 0.0, 4, "not testable"),  # n = 4: 2/24 = 0.083, whatever a t-approximated p says
    (1.0, 0.0, 5, "reproduced"),  # n = 5: 2/120 = 0.017 can pass
    (0.9, 0.001, None, "reproduced"),  # n not recorded: not checked
    (math.nan, 0.01, 10, "not testable"),
    (None, None, 10, "not testable"),
])
def test_correlation_boundaries(r, p, n, label):
    assert correlation_verdict(r, p, n, alpha=0.05) == label


def test_correlation_row_with_a_falling_claim():
    row = correlation_row({"spearman_rho": -0.8, "p_value": 0.001, "n": 16}, 0.05, None, r="spearman_rho",
                          p="p_value", sign=-1)
    assert row == {"value": -0.8, "p": 0.001, "n": 16, "seeds": None, "effect": 0.8, "verdict": "reproduced"}
    assert correlation_row({"spearman_r": -0.8, "spearman_p": 0.001, "n": 16}, 0.05, 1)["verdict"] == "not reproduced"


def test_replication_marks_one_seed_provisional():
    assert replication("reproduced", 1) == {"seeds": 1, "provisional": PROVISIONAL}
    assert replication("not reproduced", 2)["provisional"] == PROVISIONAL
    assert replication("reproduced", 3) == {"seeds": 3, "provisional": None}
    assert replication("inconclusive", 1)["provisional"] is None
    assert replication("reproduced", None)["provisional"] is None  # fixed checkpoints: no training seed
    with pytest.raises(ValueError, match="verdict"):
        replication("probably", 3)


def test_manifests_declare_consistent_studies():
    studies = L.manifests()
    assert list(studies) == list(L.STUDIES)
    for name, study in studies.items():
        assert study.name == name
        assert all(fig.name.startswith(f"{name}_") and fig.study == name for fig in study.figures), name
        assert all(fig.caption.startswith(f"{name}/") for fig in study.figures), name
        keys = [c.key for c in study.claims]
        assert len(keys) == len(set(keys)), name
        assert {f.rstrip("?") for f in study.verdict_inputs.values()} <= set(study.outputs.values()), name
        assert all(c.unit and c.rule and c.statistic and c.source for c in study.claims), name


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


LTE = {"samples_to_match": {"value": 1.2, "verdict": "reproduced"}, "least_squares": {"verdict": "not reproduced"},
       "update_rank": {"verdict": "reproduced"}, "head_orthogonality": {"verdict": "inconclusive"},
       "merge_interval": {"verdict": "reproduced"}}


def test_ledger_rows_carry_manifest_and_results(tmp_path):
    lte = _write(tmp_path / "lte" / "metrics.json", LTE)
    dens = _write(tmp_path / "density" / "metrics.json",
                  {"trend": {"spearman_r": 0.9, "spearman_p": 0.01, "n_levels": 6}})
    out = L.build({"lte": {"metrics": lte}, "density": {"metrics": dens}, "phase": {"metrics": tmp_path / "no.json"}},
                  "offline", 0.05)
    ids = [r["id"] for r in out["claims"]]
    assert ids == ["density.fig09", *[f"lte.{k}" for k in LTE]]  # the order of STUDIES, then of the manifest
    row = {r["id"]: r for r in out["claims"]}
    assert row["lte.samples_to_match"]["value"] == 1.2 and row["lte.samples_to_match"]["provisional"] == PROVISIONAL
    assert row["lte.head_orthogonality"]["provisional"] is None
    assert row["density.fig09"]["n"] == 6 and row["density.fig09"]["verdict"] == "reproduced"
    assert row["density.fig09"]["unit"] == "density level"
    assert out["missing"] == {"phase": [str(tmp_path / "no.json")]}
    # least_squares: its registered "not reproduced" stays beside; weighed, one run's sign cannot reach alpha
    assert row["lte.least_squares"]["verdict_registered"] == "not reproduced"
    assert row["lte.least_squares"]["verdict"] == "not testable" and row["lte.least_squares"]["n"] == 1
    assert out["counts"] == {"reproduced": 4, "not reproduced": 0, "inconclusive": 1, "not testable": 1}
    assert set(out["counts"]) == set(LABELS)


def test_ledger_refuses_undeclared_claims_and_bad_labels(tmp_path):
    lte = _write(tmp_path / "lte" / "metrics.json", {**LTE, "merge_interval": {"verdict": "probably"}})
    with pytest.raises(ValueError, match="probably"):
        L.build({"lte": {"metrics": lte}}, "offline", 0.05)
    with pytest.raises(UsageError, match="unknown studies"):
        L.build({"phase2": {}}, "offline", 0.05)
    with pytest.raises(UsageError, match="reads"):
        L.build({"lte": {"vision": lte}}, "offline", 0.05)


def test_a_claim_missing_from_the_results_is_not_testable(tmp_path):
    lte = _write(tmp_path / "lte" / "metrics.json", {k: v for k, v in LTE.items() if k != "update_rank"})
    row = {r["id"]: r for r in L.build({"lte": {"metrics": lte}}, "offline", 0.05)["claims"]}
    assert row["lte.update_rank"]["verdict"] == "not testable"


def test_tables_and_generated_blocks(tmp_path):
    spec = L.table()
    assert spec.count("\n") + 1 == 2 + sum(len(s.claims) for s in L.manifests().values())
    lte = _write(tmp_path / "lte" / "metrics.json", LTE)
    led = L.build({"lte": {"metrics": lte}}, "offline", 0.05)
    text = L.table(led)
    assert "| `lte.samples_to_match` | thesis section 4.3.5 | reproduced (one seed: provisional) |" in text
    # value; no interval, p, n, SESOI, MDE; the LTE budgets' POST-HOC record marks the rule; one run
    assert "| 1.2 |  |  |  |  |  | **post hoc** | training run | 1 |" in text
    doc = "a\n<!-- generated:claims -->\nold\n<!-- /generated:claims -->\nb\n"
    assert L.replace_block(doc, "claims", "new") == "a\n<!-- generated:claims -->\nnew\n<!-- /generated:claims -->\nb\n"
    with pytest.raises(UsageError, match="generated:claims"):
        L.replace_block("no markers", "claims", "x")


def test_cli_writes_ledger_and_readme(tmp_path, capsys):
    _write(tmp_path / "exp" / "lte" / "metrics.json", LTE)
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- generated:claims -->\n<!-- /generated:claims -->\n")
    L.main(["--suite", "offline", "--alpha", "0.05", "--in", str(tmp_path / "exp"), "--out", str(tmp_path / "c.json"),
            "--readme", str(readme)])
    led = json.loads((tmp_path / "c.json").read_text())
    assert [r["id"] for r in led["claims"]] == [f"lte.{k}" for k in LTE]
    assert "lte.merge_interval" in readme.read_text()
    assert "3 reproduced" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--suite and --alpha"):
        L.main(["--in", str(tmp_path / "exp")])
    with pytest.raises(SystemExit):
        L.main(["--file", "lte-metrics"])


def test_dvc_metrics_hold_the_ledger_and_every_study_s_metrics(repo_root):
    import yaml

    metrics = set(yaml.safe_load((repo_root / "dvc.yaml").read_text())["metrics"])
    assert "results/claims.json" in metrics
    for study in L.manifests().values():
        for f in study.verdict_inputs.values():
            if f.rstrip("?").endswith("metrics.json"):
                assert study.path(f.rstrip("?")) in metrics, study.path(f)


def test_readme_claims_block_is_generated(repo_root):
    """The README's claims table is the manifests' (or a committed ledger's) rendering, never typed."""
    text = (repo_root / "README.md").read_text()
    block = text.split("<!-- generated:claims -->\n", 1)[1].split("\n<!-- /generated:claims -->", 1)[0]
    ledger_copy = repo_root / "docs" / "claims.json"
    expected = L.table(json.loads(ledger_copy.read_text())) if ledger_copy.exists() else L.table()
    assert block == expected, "regenerate it: prh claims-ledger --readme README.md (see the README)"


@pytest.mark.parametrize("effects, passed, margin, label", [
    ([0.1, 0.2, 0.05], True, 0.0, "reproduced"),
    ([0.1, 0.2, 0.05], False, 0.0, "not reproduced"),  # the statistic failed although every run points the same way
    ([-0.1, -0.2, -0.05], False, 0.0, "not reproduced"),
    ([0.1, -0.2, 0.05], True, 0.0, "inconclusive"),  # runs disagree in sign
    ([0.01, 0.02, 0.015], True, 0.015, "inconclusive"),  # mean 0.015 inside the equivalence margin (boundary)
    ([0.01, 0.02, 0.0151], True, 0.015, "reproduced"),
    ([0.3], True, 0.0, "reproduced"),  # one run: labelled, then marked provisional by replication()
    ([], True, 0.0, "not testable"),
    ([0.1, math.nan, 0.2], True, 0.0, "not testable"),
    ([0.1, 0.2, 0.3], None, 0.0, "not testable"),
    ([0.0, 0.0, 0.0], True, 0.0, "inconclusive"),  # no effect at all sits on the margin
])
def test_seeds_verdict_boundaries(effects, passed, margin, label):
    from prh.claims import seeds_verdict

    assert seeds_verdict(effects, passed, margin=margin) == label


def test_workflow_files_follow_the_run_targets():
    targets = ["results/figures/lte_fig8.1_least_squares.pdf", "results/experiments/density/metrics.json",
               "results/experiments/convergence/metrics.json"]
    files = L.workflow_files(targets, "offline")
    assert files == {"convergence:metrics": "results/experiments/convergence/metrics.json",
                     "density:metrics": "results/experiments/density/metrics.json",
                     "lte:metrics": "results/experiments/lte/metrics.json"}  # platonic_metrics.json? is not a target
    with_platonic = L.workflow_files([*targets, "results/experiments/convergence/platonic_metrics.json"], "offline")
    assert with_platonic["convergence:platonic"] == "results/experiments/convergence/platonic_metrics.json"
    assert "lte:metrics" not in L.workflow_files(targets, "paper")  # the paper grid claims nothing


def test_post_hoc_changes_are_dated_where_the_readme_says(repo_root):
    """Every change made after seeing results is recorded beside its setting, dated."""
    import re

    params = (repo_root / "params.yaml").read_text()
    records = re.findall(r"POST-HOC \(recorded (\d{4}-\d\d-\d\d)", params)
    assert len(records) == params.count("POST-HOC") >= 3  # the language unit set, LTE's budgets, the ledger's rule
    assert "POST-HOC (recorded <date>)" in (repo_root / "README.md").read_text()


def test_paper_shaped_convergence_results_leave_offline_claims_not_testable(tmp_path):
    """The paper suite's convergence metrics have no pre-registered test or platonic reference (offline
    only): the replay's ledger stopped on the missing key; those claims are now not testable there."""
    corr = {"n": 12, "spearman_r": 0.6, "spearman_p": 0.01}
    conv = _write(tmp_path / "convergence" / "metrics.json",
                  {"competence_alignment": corr, "language_vision_descriptive": corr})
    rows = {r["id"]: r for r in L.build({"convergence": {"metrics": conv}}, "paper", 0.05)["claims"]}
    assert rows["convergence.fig02_competence"]["verdict"] == "reproduced"
    assert rows["convergence.fig02_competence"]["provisional"] is None  # paper: fixed checkpoints, no seeds
    for key in ("fig03_preregistered", "fig03_amended", "platonic_vision", "platonic_language"):
        assert rows[f"convergence.{key}"]["verdict"] == "not testable", key
