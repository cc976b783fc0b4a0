"""The language preset and its power analysis: >= 30 independent runs, the power committed before any run."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from prh.checks import check_config
from prh.config import language_runs, load, merge
from prh.pooling import mde_correlation, pooled_spearman_power, runs_for_power

TARGETS = ["results/experiments/convergence/relational.json", "results/figures/convergence_relational.pdf"]


@pytest.fixture(scope="module")
def preset(repo_root):
    return yaml.safe_load((repo_root / "presets" / "language.yaml").read_text())


def test_the_preset_has_36_independent_runs_over_sizes_mixes_and_seeds(repo_root, preset):
    cfg = check_config(merge(load(repo_root / "params.yaml"), preset))
    runs = {r: s for r, s in preset["zoo"]["language"].items()}
    assert len(runs) == 36 >= 30
    assert len({s["seed"] for s in runs.values()}) == 36  # distinct seeds: no two runs share an initialisation
    assert {(s["family"], s.get("relational", 0)) for s in runs.values()} == \
        {(f, x) for f in ("rel_s", "rel_m") for x in (0, 0.5, 1.0)}
    units = {r: u for r, u in language_runs(cfg).items() if r in runs}
    assert len(units) == 36 and {u["untrained"] for u in units.values()} == {"rel_s_x0_r0_0", "rel_m_x0_r0_0"}
    members = set(cfg["model_sets"]["language_relational"])
    assert {u["final"] for u in units.values()} | {u["untrained"] for u in units.values()} <= members
    assert len(members) == 110 and cfg["convergence"]["relational"]["model_set"] == "language_relational"
    # the default config scores nothing relational
    assert check_config(load(repo_root / "params.yaml"))["convergence"]["relational"]["model_set"] is None


def test_the_preset_plans_the_runs(repo_root):
    out = subprocess.run([sys.executable, "-m", "snakemake", *TARGETS, "-n", "--cores", "1", "--quiet", "rules",
                          "--configfile", "presets/language.yaml"], cwd=repo_root, capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split() for line in out.split("Job stats:", 1)[1].splitlines()[3:]]
    jobs = {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit()}
    trained = {k for k in jobs if k.startswith("train_language_")}
    assert len(trained) == 36 and all(k.startswith("train_language_rel_") for k in trained)  # not the default zoo
    assert jobs["extract_language"] == 110 and jobs["score_relational"] == 1 and jobs["align"] == 1
    assert jobs["relational_test"] == 1 and jobs["plot_convergence_relational"] == 1  # the analysis and its figure
    assert jobs["lm_eval_relational"] == 1  # the secondary predictor: bits per byte of the same models


def test_the_preset_s_ledger_holds_the_relational_test(repo_root):
    """A run of the preset with its ledger as target hands the ledger the relational test's record, from which the
    row takes its runs, power, gate and verdict (tests/test_relational_test.py); the default run's ledger does not."""
    def ledger_command(*config):
        out = subprocess.run([sys.executable, "-m", "snakemake", "results/claims.json", "-n", "-p", "--cores", "1",
                              *config], cwd=repo_root, capture_output=True, text=True, check=True).stdout
        return next(line for line in out.splitlines() if "prh claims-ledger" in line)

    record = "--file convergence:relational=results/experiments/convergence/relational.json"
    assert record in ledger_command("--configfile", "presets/language.yaml")
    assert "convergence:relational" not in ledger_command()


def test_the_mix_reaches_the_command_only_where_it_is_set(repo_root):
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1"]
    mixed = subprocess.run(cmd[:3] + ["results/models/rel_s_x1_r0_3000/config.json", "results/models/rel_s_x0_r1_3000/"
                                      "config.json"] + cmd[3:] + ["--configfile", "presets/language.yaml"],
                           cwd=repo_root, capture_output=True, text=True, check=True).stdout
    lines = [x for x in mixed.splitlines() if "prh train-language" in x]
    assert len(lines) == 2 and sum("--relational 0.5" in x for x in lines) == 1
    assert not any("--relational" in x for x in lines if "rel_s_x0_r1" in x)
    default = subprocess.run(cmd[:3] + ["results/models/gpt2_s_r0_3000/config.json"] + cmd[3:], cwd=repo_root,
                             capture_output=True, text=True, check=True).stdout
    assert "prh train-language" in default and "--relational" not in default  # the default command is unchanged


def test_the_registered_power_analysis():
    """The numbers params.yaml registers (convergence.relational, 2026-11-27): two-sided alpha 0.05, rho 0.5."""
    assert pooled_spearman_power([18, 18], 0.5) == pytest.approx(0.8505, abs=1e-9)  # the design: 0.85 >= 0.8
    assert pooled_spearman_power([15, 15], 0.5) < 0.8  # 30 runs stratified by size would not do
    assert runs_for_power(0.5, strata=2) == {"runs": 34, "per_stratum": 17, "power": pytest.approx(0.82375)}
    assert runs_for_power(0.5, strata=1)["runs"] == 30
    # the test holds its level under the null and agrees with the Fisher-z approximation
    assert pooled_spearman_power([18, 18], 0.0) == pytest.approx(0.025, abs=0.01)  # the claimed side of a 2-sided test
    assert pooled_spearman_power([18, 18], 0.0, sides=1) == pytest.approx(0.05, abs=0.012)
    assert mde_correlation([18, 18], alpha=0.05) == pytest.approx(0.48, abs=0.03)
