"""Replication: the replication rule, the ledger's join of replicate ledgers, the replicate
config and its check, and the replicate preset's plan (every replicate a Snakemake module of the DAG)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prh.checks import check_config
from prh.claims import LABELS, MIN_SEEDS, PROVISIONAL, replicated_verdict
from prh.config import load, merge, replicate_config
from prh.errors import ConfigError, UsageError
from prh.studies import ledger as L

R, NR, INC, NT = LABELS


@pytest.mark.parametrize("labels, effects, label", [
    ([R, R, R], None, R),
    ([NR, NR, NR], None, NR),
    ([R, NR, R], None, INC),  # the replicates disagree
    ([R, R, INC], None, INC),  # one cannot tell
    ([NT, NT, NT], None, NT),  # no replicate can test it
    ([NT, R, R], None, R),  # the one that cannot is left out (and fewer than MIN_SEEDS remain)
    ([NT, NT, NR], None, NR),
    ([NR, NR, NR], [0.1, -0.2, 0.1], INC),  # agreeing labels, effects of both signs
    ([NR, NR, NR], [0.1, 0.0, 0.2], NR),  # a zero effect has no sign
    ([NR, NR, NR], [None, -0.1, -0.3], NR),  # a replicate that states no effect does not vote on the sign
    ([R], [0.4], R),
])
def test_replicated_verdict_reaches_every_label(labels, effects, label):
    assert replicated_verdict(labels, effects) == label


def test_replicated_verdict_refuses_bad_input():
    with pytest.raises(ValueError, match="probably"):
        replicated_verdict([R, "probably"])
    with pytest.raises(ValueError, match="2 effects for 3"):
        replicated_verdict([R, R, R], [0.1, 0.2])


def _ledger(seed, rows, suite="offline"):
    claims = [{"id": i, "study": i.split(".")[0], "verdict": v, "value": x, "interval": None, "p": 0.01, "n": 6,
               "seeds": s, "effect": x, "provisional": None, "unit": "vision model"} for i, v, x, s in rows]
    return {"suite": suite, "alpha": 0.05, "seed": seed, "claims": claims, "counts": {}, "missing": {}}


def test_join_makes_each_replicated_claim_one_verdict_over_runs():
    base = _ledger(0, [("convergence.a", R, 0.5, 1), ("convergence.b", R, 0.4, 1), ("density.c", R, 0.9, 1),
                       ("lte.d", NT, None, 1)])
    reps = [_ledger(1000, [("convergence.a", R, 0.7, 1), ("convergence.b", NR, 0.1, 1), ("lte.d", NT, None, 1)]),
            _ledger(2000, [("convergence.a", R, 0.6, 1), ("convergence.b", R, 0.3, 1), ("lte.d", NT, None, 1)])]
    out = L.join(base, reps)
    rows = {r["id"]: r for r in out["claims"]}
    a = rows["convergence.a"]
    assert a["verdict"] == R and a["seeds"] == 3 and a["provisional"] is None  # three agreeing runs: not provisional
    assert a["value"] == pytest.approx(0.6) and a["p"] is None
    lo, hi = a["interval"]  # a t-interval of the mean over the three runs: 0.6 +- t(0.975, 2) 0.1 / sqrt(3)
    assert hi - 0.6 == pytest.approx(0.6 - lo) == pytest.approx(4.302653 * 0.1 / 3 ** 0.5, rel=1e-5)
    assert [e["seed"] for e in a["per_seed"]] == [0, 1000, 2000] and [e["value"] for e in a["per_seed"]] == [0.5, 0.7, 0.6]
    assert a["unit"] == "independent run (within one: vision model)"  # the replicated verdict's unit is the run
    assert rows["lte.d"]["unit"] == "vision model"  # no runs stated (not testable anywhere): no run unit claimed
    base_run = _ledger(0, [("lte.e", R, 1.0, 1)])
    base_run["claims"][0]["unit"] = "training run"
    rep_run = _ledger(1000, [("lte.e", R, 1.1, 1)])
    assert L.join(base_run, [rep_run])["claims"][0]["unit"] == "training run"  # already the run: kept
    assert rows["convergence.b"]["verdict"] == INC and "seed 1000 not reproduced" in rows["convergence.b"]["note"]
    assert rows["density.c"] == {**base["claims"][2], "note": None}  # no replicate runs density: its entry stays
    assert rows["lte.d"]["verdict"] == NT and rows["lte.d"]["seeds"] is None and rows["lte.d"]["interval"] is None
    assert out["counts"] == {R: 2, NR: 0, INC: 1, NT: 1} and out["replicate_seeds"] == [0, 1000, 2000]
    assert L.join(base, []) is base


def test_join_says_which_replicates_lack_a_claim_and_keeps_notes():
    base = _ledger(0, [("convergence.a", R, 0.5, 1), ("convergence.b", R, 0.4, 3)])
    base["claims"][0]["note"] = "run-level p = 0.2"
    rep = _ledger(1000, [("convergence.a", R, 0.6, 1)])
    rep["missing"] = {"phase": ["results/replicates/seed1000/experiments/phase/metrics.json"]}
    out = L.join(base, [rep])
    a, b = out["claims"]
    assert a["per_seed"][0]["note"] == "run-level p = 0.2" and a["note"].endswith("seed 0: run-level p = 0.2")
    assert b["verdict"] == R and "not judged by replicate seed(s) [1000]" in b["note"]  # a replicated study's claim
    assert out["replicates_missing"] == {"seed1000": rep["missing"]}


def test_join_counts_no_runs_where_no_replicate_states_any():
    """Fixed public checkpoints (seeds None) are not independent runs, however often they are reanalysed."""
    base = _ledger(0, [("convergence.a", R, 0.5, None)])
    out = L.join(base, [_ledger(1000, [("convergence.a", R, 0.5, None)]), _ledger(2000, [("convergence.a", R, 0.5, None)])])
    assert out["claims"][0]["seeds"] is None and out["claims"][0]["provisional"] is None


def test_join_marks_fewer_than_three_runs_provisional_and_sums_runs():
    base = _ledger(0, [("convergence.a", NR, -0.1, 2)])
    out = L.join(base, [_ledger(1000, [("convergence.a", NT, None, 2)])])
    row = out["claims"][0]
    assert row["verdict"] == NR and row["seeds"] == 2 < MIN_SEEDS and row["provisional"] == PROVISIONAL
    out = L.join(base, [_ledger(1000, [("convergence.a", NR, -0.2, 2)])])
    assert out["claims"][0]["seeds"] == 4 and out["claims"][0]["provisional"] is None  # 2 runs in each of 2 replicates


def test_join_refuses_replicates_of_the_same_seed_or_another_suite():
    base = _ledger(0, [("convergence.a", R, 0.5, 1)])
    with pytest.raises(UsageError, match="distinct master seeds"):
        L.join(base, [_ledger(0, [("convergence.a", R, 0.5, 1)])])
    with pytest.raises(UsageError, match="distinct master seeds"):
        L.join({**base, "seed": None}, [_ledger(1000, [])])
    with pytest.raises(UsageError, match="another suite"):
        L.join(base, [_ledger(1000, [], suite="paper")])


def test_cli_joins_replicate_ledgers(tmp_path):
    # samples_to_match is weighed (run_matches, 1.4 +- 0.4): two runs at 1.40 and 1.41 lie inside the margin
    metrics = {"samples_to_match": {"value": 1.40, "verdict": R}, "least_squares": {"verdict": NR}}
    (tmp_path / "exp" / "lte").mkdir(parents=True)
    (tmp_path / "exp" / "lte" / "metrics.json").write_text(json.dumps(metrics))
    rep = tmp_path / "rep.json"
    rep.write_text(json.dumps(_ledger(1000, [("lte.samples_to_match", R, 1.41, 1), ("lte.least_squares", R, 1.0, 1)])))
    L.main(["--suite", "offline", "--alpha", "0.05", "--seed", "0", "--file", f"lte:metrics={tmp_path}/exp/lte/metrics.json",
            "--replicate", str(rep), "--out", str(tmp_path / "c.json")])
    rows = {r["id"]: r for r in json.loads((tmp_path / "c.json").read_text())["claims"]}
    assert rows["lte.samples_to_match"]["verdict"] == R and rows["lte.samples_to_match"]["seeds"] == 2
    assert rows["lte.samples_to_match"]["verdict_registered"] == R and rows["lte.samples_to_match"]["replicates"] == 2
    assert rows["lte.samples_to_match"]["provisional"] == PROVISIONAL
    # a sign test over the runs' signs (the weighed decision): two runs cannot reach alpha (best two-sided p 0.5)
    assert rows["lte.least_squares"]["verdict"] == "not testable"


def test_replicate_config_moves_the_results_and_the_seed(repo_root):
    cfg = check_config(load(repo_root / "params.yaml"))
    rep = replicate_config(merge(cfg, {"claims": {"replicates": [1000]}}), 2000)
    assert rep["seed"] == 2000 and rep["results"] == "results/replicates/seed2000"
    assert rep["claims"]["replicates"] == [] and rep["claims"]["alpha"] == cfg["claims"]["alpha"]
    assert rep["zoo"] == cfg["zoo"] and cfg["results"] == "results"
    check_config(rep)  # a valid config of its own


@pytest.mark.parametrize("replicates, bad", [([1000, 1050], "1000 and 1050"), ([50], "0 and 50")])
def test_replicate_seeds_must_lie_apart(repo_root, replicates, bad):
    cfg = merge(load(repo_root / "params.yaml"), {"claims": {"replicates": replicates}})
    with pytest.raises(ConfigError, match=f"claims.replicates.*{bad}"):
        check_config(cfg)


def test_the_replicate_preset_plans_each_seed_as_a_module(repo_root):
    """The preset's dry run: seeds 1000 and 2000 are the DAG again (rules seed<S>_*) under results/replicates/seed<S>,
    asked only for the training-based studies; the run's own seed builds the whole default DAG."""
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules", "--configfile", "presets/replicate.yaml"],
                         cwd=repo_root, capture_output=True, text=True, check=True).stdout
    default = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules"], cwd=repo_root, capture_output=True,
                             text=True, check=True).stdout

    def jobs(text):
        rows = [line.split() for line in text.split("Job stats:", 1)[1].splitlines()[3:]]
        return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] != "total"}

    rep, base = jobs(out), jobs(default)
    for seed in (1000, 2000):
        mine = {k.removeprefix(f"seed{seed}_"): v for k, v in rep.items() if k.startswith(f"seed{seed}_")}
        assert mine["claims_ledger"] == 1 and mine["train_vision"] == base["train_vision"]
        assert mine["bridge_arm"] == base["bridge_arm"] and mine["lte_vision"] == 1 and mine["phase_analyse"] == 1
        assert sum(v for k, v in mine.items() if k.startswith("train_language")) == \
            sum(v for k, v in base.items() if k.startswith("train_language"))
        # the studies that read the zoo's models are replicated with it (every training-based claim)
        assert mine["downstream_mc"] == base["downstream_mc"] and mine["density"] == 1
        assert mine["extract_language_density"] == base["extract_language_density"]
        assert mine["metric_agreement"] == 1 and mine["sample_size"] == 1
        # not training-based: not replicated; figures: not drawn for a replicate
        assert not {k for k in mine if k.startswith(("simplicity", "transfer", "color", "plot_"))}
    assert {k: v for k, v in rep.items() if not k.startswith("seed")} == base  # the run's own seed: the default DAG


def test_the_table_shows_each_replicate_s_verdict():
    base = _ledger(0, [("convergence.fig02_competence", R, 0.5, 1)])
    led = L.join(base, [_ledger(1000, [("convergence.fig02_competence", R, 0.7, 1)]),
                        _ledger(2000, [("convergence.fig02_competence", NR, -0.1, 1)])])
    led["claims"][0].update(source="PRH Fig 2", statement="s", statistic="r", rule="r > 0")
    text = L.table(led)
    assert text.startswith("Suite `offline`, master seeds 0, 1000, 2000: 0 reproduced, 0 not reproduced, 1 inconclusive")
    assert text.rstrip().endswith("| independent run (within one: vision model) | 3 (reproduced / reproduced / not reproduced) |")


def test_replicate_seeds_clear_the_largest_own_seed(repo_root):
    cfg = merge(load(repo_root / "params.yaml"), {"claims": {"replicates": [1000]},
                                                  "bridge": {"offline": {"sweeps": [{"init": ["scratch"], "ratio": [1.0],
                                                                                     "blocks": ["all"], "seed": [0, 1500]}]}}})
    with pytest.raises(ConfigError, match="less than 1501 apart"):
        check_config(cfg)


def test_a_run_with_replicates_keeps_the_default_results_root(repo_root):
    cfg = merge(load(repo_root / "params.yaml"), {"claims": {"replicates": [1000]}, "results": "results/replicates/seed5"})
    with pytest.raises(ConfigError, match="keeps `results: results`"):
        check_config(cfg)
    with pytest.raises(ValueError, match="results root"):
        replicate_config({"results": "results/replicates/seed5"}, 1000)


@pytest.mark.parametrize("suite, fig2_seeds", [("offline", 1), ("paper", None)])
def test_bridge_counts_the_runs_behind_every_claim(suite, fig2_seeds):
    """A replicated claim needs its runs stated: appendix A's arms are trained (one run each) in every suite;
    Fig 2's trained vision models are one zoo draw offline and fixed public checkpoints in the paper suite."""
    from prh.studies.bridge.manifest import results

    claims = {"fig3_random_labels": {"arms_A": ["a_s0", "a_s1"], "mean": 0.1, "lo": 0.0, "hi": 0.2, "n_units": 4, "verdict": R},
              "appA_covariance_alignment": {"arms": {"a": {}, "b": {}}, "verdict": R},
              "fig2_outliers": {"language_pretrained": {}, "vision_trained": {}, "verdict": R}}
    rows = results(suite, 0.05, metrics={"claims": claims})
    assert rows["fig3_random_labels"]["seeds"] == 2 and rows["appA_covariance_alignment"]["seeds"] == 1
    assert rows["fig2_outliers"]["seeds"] == fig2_seeds
