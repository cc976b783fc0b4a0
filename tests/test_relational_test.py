"""The relational test (prh.studies.convergence.relational): the run as unit, sizes as strata, the ledger row
weighed from those strata, the gate that makes it not testable, the command and its figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prh.claims import weigh
from prh.errors import UsageError
from prh.figures import draw
from prh.io import read_json, write_json
from prh.pooling import pooled_spearman
from prh.stats import spearman_permutation
from prh.studies.convergence.manifest import results
from prh.studies.convergence.relational import main, relational_runs, relational_test
from prh.studies.ledger import weighed

VISION = ["v0", "v1"]
METRICS = {k: {"spearman_r": 0.5, "spearman_p": 0.1, "n": 5} for k in ("competence_alignment", "language_vision_descriptive")}


def zoo(per_family=6):
    runs = {}
    for f in ("rel_s", "rel_m"):
        for i in range(per_family):
            mix = (0.0, 0.5, 1.0)[i % 3]
            runs[f"{f}_r{i}"] = {"arch": "gpt2", "family": f, "steps": 30, "seed": i,
                                 "checkpoints": ([0] if i == 0 else []) + [10, 30],
                                 **({"relational": mix} if mix else {})}
    runs["gpt2_s_r0"] = {"arch": "gpt2", "family": "gpt2_s", "checkpoints": [0, 30], "seed": 99}  # not in the set
    return runs


def model_set(z):
    return [f"{r}_{k}" for r, s in z.items() if r.startswith("rel") for k in s["checkpoints"]]


def fixture(seed=0, gain_slope=1.0, passing=True, per_family=6):
    """A score table and a cross table in which the gain rises with accuracy (slope) plus noise."""
    rng = np.random.default_rng(seed)
    z = zoo(per_family)
    names = model_set(z)
    acc = {m: float(rng.uniform(0.2, 0.9)) for m in names}
    outcome = {m: gain_slope * acc[m] + 0.05 * float(rng.standard_normal()) for m in names}
    for m in names:
        if m.endswith("_0"):
            outcome[m] = 0.0
    scores = np.array([[outcome[m] + 0.1, outcome[m] + 0.1] for m in names])
    cross = {"scores": scores.tolist(), "x_names": names, "y_names": VISION,
             "calibration": {"null_max_mean": np.full_like(scores, 0.1).tolist(), "permutations": 20}}
    relational = {"models": {m: {"accuracy": acc[m], "chance": 0.25, "gate": {"passed": passing and m.endswith("_30")}}
                             for m in names}}
    return z, names, relational, cross, acc, outcome


def test_units_are_runs_with_their_size_untrained_reference():
    z = zoo()
    runs = relational_runs(z, model_set(z))
    assert len(runs) == 12 and "gpt2_s_r0" not in runs
    assert runs["rel_m_r4"] == {"final": "rel_m_r4_30", "untrained": "rel_m_r0_0", "family": "rel_m", "mix": 0.5,
                                "checkpoints": [(10, "rel_m_r4_10"), (30, "rel_m_r4_30")]}
    # a run with a checkpoint outside the set is not a unit
    assert "rel_s_r3" not in relational_runs(z, [m for m in model_set(z) if m != "rel_s_r3_10"])


def test_the_strata_r_the_pooled_p_and_the_row_the_ledger_weighs():
    z, names, relational, cross, acc, outcome = fixture()
    runs = relational_runs(z, names)
    res = relational_test(relational=relational, cross=cross, runs=runs, vision_models=VISION, alpha=0.05,
                          sesoi=0.1, effect=0.5, power_sims=400)
    assert res["n"] == 12 and res["unit"].startswith("training run")
    for f in ("rel_s", "rel_m"):
        finals = [r["final"] for r in runs.values() if r["family"] == f]
        expect = spearman_permutation([acc[m] for m in finals], [outcome[m] for m in finals], alternative="two-sided")
        assert res["strata"][f]["spearman_r"] == pytest.approx(expect["spearman_r"])
        assert res["strata"][f]["n"] == 6
    pooled = pooled_spearman([s["spearman_r"] for s in res["strata"].values()], [6, 6])
    assert res["weighed"]["p"] == pytest.approx(pooled["p"])
    assert res["verdict"] == "reproduced" and res["gate"]["n_passed"] == 12
    point = next(p for p in res["points"] if p["run"] == "rel_s_r2")
    assert point["gain"] == pytest.approx(outcome["rel_s_r2_30"] - outcome["rel_s_r0_0"])
    assert [t["step"] for t in point["trajectory"]] == [0, 10, 30]
    assert 0 < res["power"]["power"] < 1 and res["power"]["ns"] == [6, 6]
    assert res["competence"]["runs_above_chance"] == sum(acc[r["final"]] > 0.25 for r in runs.values())
    assert res["secondary"]["note"].startswith("not computed")
    bpb = {"models": {m: {"reducible_fraction": acc[m]} for m in names}}  # as the primary: the same ranks
    second = relational_test(relational=relational, cross=cross, runs=runs, vision_models=VISION, alpha=0.05,
                             sesoi=0.1, effect=0.5, power_sims=10, bpb=bpb)["secondary"]
    assert second["strata"]["rel_s"]["spearman_r"] == pytest.approx(res["strata"]["rel_s"]["spearman_r"])
    assert second["p"] == pytest.approx(res["weighed"]["p"], abs=0.01)
    # the ledger row: weighed from its strata, the same pooled test as the command's
    row = results("offline", 0.05, metrics=METRICS, platonic=None, relational=res)["relational"]
    decision = {"kind": "correlation", "sesoi": 0.1, "reason": "x", "set": "y"}
    got = weighed(row, decision, 0.05)
    direct = weigh(decision, row["strata"], alpha=0.05)
    assert got["p"] == pytest.approx(direct["p"]) == pytest.approx(res["weighed"]["p"])
    assert got["verdict"] == "reproduced" and got["n"] == [6, 6] and row["seeds"] == 12


def test_no_run_following_the_swap_makes_it_not_testable_and_no_trend_not_reproduced():
    z, names, relational, cross, *_ = fixture(passing=False)
    res = relational_test(relational=relational, cross=cross, runs=relational_runs(z, names), vision_models=VISION,
                          alpha=0.05, sesoi=0.1, effect=0.5, power_sims=200)
    assert res["verdict"] == "not testable" and "left-most swap" in res["weighed"]["note"]
    row = results("offline", 0.05, metrics=METRICS, platonic=None, relational=res)["relational"]
    assert weighed(row, {"kind": "correlation", "sesoi": 0.1, "reason": "x", "set": "y"}, 0.05)["verdict"] == \
        "not testable"
    # many runs, no relation: the pooled interval excludes the SESOI -> not reproduced
    z, names, relational, cross, *_ = fixture(gain_slope=0.0, per_family=60)
    res = relational_test(relational=relational, cross=cross, runs=relational_runs(z, names), vision_models=VISION,
                          alpha=0.05, sesoi=0.3, effect=0.5, power_sims=100)
    assert res["weighed"]["interval"][1] < 0.3 and res["verdict"] == "not reproduced"


def test_the_command_weighs_by_the_ledger_s_decision_at_the_registered_sesoi(repo_root):
    from prh.checks import check_config
    from prh.config import load
    from prh.studies.convergence.relational import claim_decision

    decision = claim_decision()
    assert decision["kind"] == "correlation" and decision["strata"] == "fixed"
    # params.yaml's pre-registration states the SESOI the manifest's decision (the one the command reads) holds
    assert check_config(load(repo_root / "params.yaml"))["convergence"]["relational"]["sesoi"] == decision["sesoi"]


def test_a_final_checkpoint_without_a_score_is_named():
    z, names, relational, cross, *_ = fixture()
    del relational["models"]["rel_m_r3_30"]
    with pytest.raises(ValueError, match=r"\['rel_m_r3_30'\] have no relational score"):
        relational_test(relational=relational, cross=cross, runs=relational_runs(z, names), vision_models=VISION,
                        alpha=0.05, sesoi=0.1, effect=0.5)


def test_the_command_writes_the_test_and_its_figure_draws(tmp_path):
    z, names, relational, cross, *_ = fixture()
    write_json(tmp_path / "rel.json", relational)
    write_json(tmp_path / "cross.json", cross)
    cfg = json.dumps({"convergence.relational": {"alpha": 0.05, "effect": 0.5, "seed": 0}})
    args = ["--relational", str(tmp_path / "rel.json"), "--cross", str(tmp_path / "cross.json"), "--zoo", json.dumps(z),
            "--config", cfg, "--out", str(tmp_path / "out.json"), "--model-set", *names]
    main(args)
    out = read_json(tmp_path / "out.json")
    assert out["n"] == 12 and out["vision_models"] == VISION
    files = draw("convergence_relational", tmp_path / "relational.pdf", {"relational": str(tmp_path / "out.json")})
    assert all(f.stat().st_size > 1000 for f in files)
    with pytest.raises(UsageError, match="no zoo.language run"):
        main(args[:-len(names)] + ["other_0"])


def test_strata_of_one_design_pool_by_fixed_effect_and_the_bound_the_amendment_states():
    from prh.claims import check_decision
    from prh.pooling import fisher_z_meta

    fixed = fisher_z_meta([0.3, 0.5], [18, 18], fixed=True)
    z = (np.arctanh(0.3) + np.arctanh(0.5)) / 2
    se = np.sqrt(1.06 / 15 / 2)
    assert fixed["estimate"] == pytest.approx(np.tanh(z))
    assert fixed["interval"] == pytest.approx([np.tanh(z - 1.959964 * se), np.tanh(z + 1.959964 * se)], rel=1e-5)
    assert fisher_z_meta([0.3, 0.5], [18, 18])["interval"][0] < -0.9  # random effects, 1 df: nearly [-1, 1]
    # params.yaml's amendment: at 2 x 18 runs "not reproduced" (upper < 0.1) needs a pooled r at about -0.26
    assert fisher_z_meta([-0.27] * 2, [18, 18], fixed=True)["interval"][1] < 0.1
    assert fisher_z_meta([-0.25] * 2, [18, 18], fixed=True)["interval"][1] > 0.1
    with pytest.raises(ValueError, match="strata must be one of"):
        check_decision({"kind": "correlation", "sesoi": 0.1, "reason": "x", "set": "y", "strata": "pooled"})


def test_a_ledger_takes_the_relational_row_from_the_language_run_s_record(repo_root, tmp_path):
    """The README's ledger (the replicate preset's, which trains no relational zoo) takes the row from the language
    preset's record: its 36 runs, the pooled r and interval, the power and the gate, and the verdict the registered
    test gave. The row is weighed on its strata, as the command weighs it: with the gate failed, "not testable"
    (weighed on the pooled numbers alone, as the ledger's rows once were, it read "not reproduced")."""
    from prh.studies.ledger import main as ledger_main
    from prh.studies.ledger import read_ledger, with_record

    ledger, record = read_ledger(repo_root / "docs" / "claims.json"), read_json(repo_root / "docs" / "language_relational.json")
    got = with_record(ledger, "convergence.relational", record)
    row = next(r for r in got["claims"] if r["id"] == "convergence.relational")
    assert row["verdict"] == row["verdict_registered"] == "not testable" and row["n"] == row["seeds"] == 36
    assert row["value"] == pytest.approx(record["weighed"]["value"]) and row["interval"] == record["weighed"]["interval"]
    assert "power 0.85" in row["note"] and "0 of 36 final checkpoints" in row["note"] and row["unit"] == "training run"
    assert got["counts"] == ledger["counts"]  # not testable before (not run) and after (gate failed)
    assert [r for r in got["claims"] if r["id"] != row["id"]] == [r for r in ledger["claims"] if r["id"] != row["id"]]
    passed = {**record, "gate": {**record["gate"], "passed": True}}  # had the gate passed: the same numbers
    assert next(r for r in with_record(ledger, "convergence.relational", passed)["claims"]
                if r["id"] == "convergence.relational")["verdict"] == "not reproduced"
    for bad in ("convergence.fig02_competence", "convergence.no_such_claim", "nostudy.relational"):
        with pytest.raises(UsageError, match=bad.replace(".", r"\.")):
            with_record(ledger, bad, record)
    out = tmp_path / "claims.json"
    ledger_main(["--ledger", str(repo_root / "docs" / "claims.json"), "--record",
                 f"convergence.relational={repo_root / 'docs' / 'language_relational.json'}", "--out", str(out)])
    assert read_ledger(out)["claims"] == got["claims"]
    with pytest.raises(UsageError, match="CLAIM=PATH"):
        ledger_main(["--ledger", str(out), "--record", "convergence.relational"])
