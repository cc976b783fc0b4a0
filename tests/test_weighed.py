"""Verdicts that weigh the evidence (prh.claims.weigh and its parts), every boundary of the rule."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from prh.claims import check_decision, weigh, weighed_verdict
from prh.pooling import (fisher_z_meta, mde_correlation, mde_difference, pooled_spearman,
                         random_effects, spearman_min_p, spearman_null)

DEC = {"kind": "correlation", "sesoi": 0.3, "reason": "test", "set": "2026-11-27"}


def test_the_exact_null_of_spearman_r():
    r, p = spearman_null(4)
    assert p.sum() == pytest.approx(1.0) and r[-1] == 1.0 and p[-1] == pytest.approx(1 / 24)
    assert float(r @ p) == pytest.approx(0.0, abs=1e-12)  # symmetric about 0
    assert float((r**2) @ p) == pytest.approx(1 / 3)  # var r_s = 1 / (n - 1)
    with pytest.raises(ValueError, match="3 <= n <= 8"):
        spearman_null(9)


def test_pooled_sum_of_r_matches_the_audit():
    """density.fig09: r = 0.60 / 0.71 / 0.60 at n = 6 levels; the audit's exact sum-of-r test gave p = 0.0055."""
    out = pooled_spearman([0.6, 5 / 7, 0.6], [6, 6, 6])
    assert out["null"] == "exact" and out["statistic"] == pytest.approx(1.9142857)
    assert out["p_greater"] == pytest.approx(0.0055366, abs=1e-6)
    assert out["p"] == pytest.approx(2 * out["p_greater"])
    one = pooled_spearman([1.0], [5])  # the one best ordering of 120
    assert one["p_greater"] == pytest.approx(1 / 120) and one["p"] == pytest.approx(2 / 120) == one["min_p"]


def test_pooled_sum_of_r_by_permutation_is_seeded_and_near_exact():
    a = pooled_spearman([0.5, 0.4], [12, 9], permutations=20_000, seed=3)
    assert a == pooled_spearman([0.5, 0.4], [12, 9], permutations=20_000, seed=3)
    assert a["null"] == "permutation (20000 draws)"
    # the sum of r over untied replicates is near normal with variance sum 1 / (n - 1)
    from scipy.stats import norm

    approx = norm.sf(0.9 / math.sqrt(1 / 11 + 1 / 8))
    assert a["p_greater"] == pytest.approx(approx, abs=0.006)
    mixed = pooled_spearman([0.5, 0.4], [12, 5], permutations=20_000)  # n <= 8 drawn from its exact null
    assert 0 < mixed["p_greater"] < 1
    with pytest.raises(ValueError, match="one r per replicate"):
        pooled_spearman([0.5], [6, 6])
    with pytest.raises(ValueError, match="every n >= 3"):
        pooled_spearman([0.5], [2])


@pytest.mark.parametrize("ns, tests, testable", [
    ([4], 1, False),  # 2 / 24 = 0.083
    ([4], 2, False),  # Holm at 4 runs: 0.167 (the amended test with 4 runs can never fire)
    ([5], 1, True),  # 2 / 120 = 0.0167
    ([5], 2, True),  # 0.033
    ([5], 3, False),  # 0.05 exactly: p < alpha is out of reach
    ([5], 4, False),  # 0.067
    ([3, 3], 1, False),  # 2 / 36 = 0.056
    ([3, 3, 3], 1, True),  # 2 / 216 = 0.0093: three replicates of 3 runs can test what one cannot
])
def test_testable_comes_from_the_exact_null(ns, tests, testable):
    min_p = spearman_min_p(ns, tests)
    assert min_p == pytest.approx(min(1, tests * 2 / math.prod(math.factorial(n) for n in ns)))
    got = weigh({**DEC, "tests": tests}, [{"value": 1.0, "n": n} for n in ns], alpha=0.05)["verdict"]
    assert (got != "not testable") is testable
    if testable:
        assert got == "reproduced"  # every replicate perfectly ordered: the smallest p, below alpha


@pytest.mark.parametrize("effect, p, interval, min_p, gate, label", [
    (0.5, 0.049, [0.1, 0.8], None, True, "reproduced"),
    (0.5, 0.05, [0.1, 0.8], None, True, "inconclusive"),  # p must be below alpha, not at it
    (0.5, 0.05, [-0.1, 0.2999], None, True, "not reproduced"),  # interval wholly below the SESOI 0.3
    (0.5, 0.05, [-0.1, 0.3], None, True, "inconclusive"),  # hi at the SESOI: the SESOI is not excluded
    (-0.5, 0.001, [-0.9, -0.1], None, True, "not reproduced"),  # significant the wrong way, SESOI excluded
    (-0.5, 0.001, [-0.9, 0.35], None, True, "inconclusive"),  # the wrong way, but the SESOI inside: never "not"
    (0.0, 0.001, [-0.1, 0.1], None, True, "not reproduced"),  # no direction: not reproduced only by the interval
    (0.5, 0.01, None, None, True, "reproduced"),
    (0.5, 0.2, None, None, True, "inconclusive"),  # no interval: cannot exclude the SESOI
    (0.5, 0.01, [0.1, 0.8], 0.0499, True, "reproduced"),  # min_p below alpha: can fire
    (0.5, 0.01, [0.1, 0.8], 0.05, True, "not testable"),  # at alpha: p < alpha is out of reach
    (0.5, 0.01, [0.1, 0.8], None, False, "inconclusive"),  # failed validity gate
    (0.5, 0.01, [0.1, 0.8], None, None, "inconclusive"),  # gate not judged
    (math.nan, 0.01, [0.1, 0.8], None, True, "not testable"),
    (0.5, None, [0.1, 0.8], None, True, "not testable"),
])
def test_weighed_verdict_boundaries(effect, p, interval, min_p, gate, label):
    assert weighed_verdict(effect=effect, p=p, interval=interval, sesoi=0.3, alpha=0.05, min_p=min_p, gate=gate) == label


def test_weighed_verdict_refuses_bad_settings():
    with pytest.raises(ValueError, match="sesoi"):
        weighed_verdict(effect=0.5, p=0.01, interval=None, sesoi=0.0, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        weighed_verdict(effect=0.5, p=0.01, interval=None, sesoi=0.3, alpha=1.5)


def test_never_not_reproduced_while_the_interval_holds_the_sesoi():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        k = int(rng.integers(1, 4))
        ns = rng.integers(4, 9, size=k).tolist()  # exact nulls (fast); the permutation path is tested above
        rs = np.clip(rng.normal(0.1, 0.4, size=k), -0.99, 0.99).tolist()
        out = weigh(DEC, [{"value": r, "n": n} for r, n in zip(rs, ns)], alpha=0.05)
        seen.add(out["verdict"])
        if out["verdict"] == "not reproduced":
            assert out["interval"][1] < DEC["sesoi"], out
        if out["verdict"] == "reproduced":
            assert out["p"] < 0.05 and out["value"] > 0
    assert {"reproduced", "not reproduced", "inconclusive"} <= seen


def test_random_effects_known_numbers():
    out = random_effects([0.2, 0.2, 0.2], [0.1, 0.1, 0.1])
    assert out["tau2"] == 0 and out["estimate"] == pytest.approx(0.2)
    from scipy.stats import t

    # equal effects: the HK variance is 0, so the DerSimonian-Laird one (0.01 / 3) is used, with t on 2 df
    assert out["interval"][1] - 0.2 == pytest.approx(t.ppf(0.975, 2) * math.sqrt(0.01 / 3))
    het = random_effects([0.0, 0.5, 1.0], [0.1, 0.1, 0.1])
    assert het["tau2"] == pytest.approx((2 * 0.25 / 0.01 - 2) / (300 - 30000 / 300))
    one = random_effects([0.3], [0.1])
    assert one["interval"] == pytest.approx([0.3 - 1.959964 * 0.1, 0.3 + 1.959964 * 0.1])
    with pytest.raises(ValueError, match="standard errors"):
        random_effects([0.1, 0.2], [0.1, 0.0])


def test_fisher_z_interval_and_mde():
    meta = fisher_z_meta([0.6, 5 / 7, 0.6], [6, 6, 6])
    assert meta["interval"][0] < 0.3 < meta["interval"][1]  # density.fig09: three replicates of 6 cannot exclude 0.3
    assert fisher_z_meta([0.9], [3]) is None  # n = 3: no z variance
    # one replicate of 6: tanh((1.96 + 0.8416) / sqrt(3 / 1.06)) = 0.931 (a 6-point Spearman test detects little)
    assert mde_correlation([6], alpha=0.05) == pytest.approx(0.9309, abs=1e-4)
    assert mde_correlation([6, 6, 6], alpha=0.05) == pytest.approx(math.tanh(2.8016 / math.sqrt(9 / 1.06)), abs=1e-4)
    assert mde_correlation([6], alpha=0.05, tests=2) > mde_correlation([6], alpha=0.05)
    assert mde_correlation([3], alpha=0.05) is None
    assert mde_difference([0.01, 0.01], alpha=0.05) == pytest.approx(2.8016 * 0.01 / math.sqrt(2), abs=1e-5)


@pytest.mark.parametrize("bad, match", [
    ({**DEC, "kind": "rises"}, "kind"),
    ({**DEC, "sesoi": 0}, "sesoi"),
    ({**DEC, "sesoi": True}, "sesoi"),
    ({k: v for k, v in DEC.items() if k != "reason"}, "reason"),
    ({**DEC, "set": " "}, "set"),
    ({**DEC, "direction": 0}, "direction"),
    ({**DEC, "tests": 0}, "tests"),
    ({**DEC, "runs": 1}, "runs"),
    ({**DEC, "margin": 1}, "unknown keys"),
])
def test_decisions_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        check_decision(bad, "x.y")


def test_weigh_differences_and_clusters():
    beats = {**DEC, "kind": "beats", "sesoi": 0.02}
    # three replicates whose own intervals are all above 0: pooled reproduced
    up = [{"value": 0.05, "interval": [0.03, 0.07]}] * 3
    assert weigh(beats, up, alpha=0.05)["verdict"] == "reproduced"
    down = [{"value": -0.01, "interval": [-0.02, 0.0]}] * 3
    out = weigh(beats, down, alpha=0.05)
    assert out["verdict"] == "not reproduced" and out["interval"][1] < 0.02
    matches = {**beats, "kind": "matches"}
    assert weigh(matches, [{"value": 0.0, "interval": [-0.01, 0.01]}] * 3, alpha=0.05)["verdict"] == "reproduced"
    assert weigh(beats, [{"value": 0.05}], alpha=0.05)["verdict"] == "not testable"
    clustered = {**DEC, "runs": 6}
    out = weigh(clustered, [{"value": 0.6, "n": 33, "p": 1e-4}] * 3, alpha=0.05)
    assert out["verdict"] == "inconclusive" and out["mde"] == pytest.approx(mde_correlation([6] * 3, alpha=0.05))
    assert weigh({**DEC, "runs": 4, "tests": 2}, [{"value": 0.6, "n": 30}], alpha=0.05)["verdict"] == "not testable"
    gated = weigh(DEC, [{"value": 0.9, "n": 8, "gate": False}] * 3, alpha=0.05)
    assert gated["verdict"] == "inconclusive" and "validity gate not passed" in gated["note"]
    assert weigh({**DEC, "kind": "descriptive"}, [{"value": 0.4, "n": 462}], alpha=0.05)["verdict"] == "not testable"
    falls = weigh({**DEC, "direction": -1}, [{"value": -0.9, "n": 8}] * 2, alpha=0.05)
    assert falls["verdict"] == "reproduced" and falls["value"] < 0 and falls["interval"][0] < falls["value"]


# --- the ledger: replicates pooled, not voted -------------------------------------------------------------------------

def _density_ledger(tmp_path, seed, r, p, n):
    from prh.studies import ledger as L

    path = tmp_path / f"s{seed}" / "density" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(__import__("json").dumps({"trend": {"spearman_r": r, "spearman_p": p, "n_levels": n}}))
    return L.build({"density": {"metrics": path}}, "offline", 0.05, seed)


def test_join_pools_replicates_and_keeps_their_own_verdicts(tmp_path):
    """density.fig09 as the replicate run found it: every seed 'not reproduced' at n = 6, pooled p = 0.011."""
    from prh.studies import ledger as L

    runs = [_density_ledger(tmp_path, s, r, p, 6) for s, r, p in ((0, 0.6, 0.208), (1000, 5 / 7, 0.111), (2000, 0.6, 0.208))]
    one = runs[0]["claims"][0]
    assert one["verdict_registered"] == "not reproduced" and one["verdict"] == "inconclusive"  # one seed, SESOI inside
    assert one["provisional"] is None and one["recorded"]["p"] == 0.208
    row = L.join(runs[0], runs[1:])["claims"][0]
    assert row["verdict"] == "reproduced" and row["verdict_registered"] == "not reproduced"
    assert row["p"] == pytest.approx(2 * 0.0055366, abs=1e-6) and row["replicates"] == 3 and row["provisional"] is None
    assert row["sesoi"] == 0.3 and row["mde"] == pytest.approx(mde_correlation([6, 6, 6], alpha=0.05))
    assert [e["verdict_registered"] for e in row["per_seed"]] == ["not reproduced"] * 3
    # both rules set after a look: the registered one's record and the weighed decision
    assert row["post_hoc"].startswith("POST-HOC (recorded 2026-11-26, with the claims ledger")
    assert "POST-HOC (recorded 2026-11-27, with the weighed verdicts, docs/replication.md)" in row["post_hoc"]
    assert L.reweigh(L.join(runs[0], runs[1:]))["claims"][0] == row  # reweighing a new ledger changes nothing


def test_one_testing_replicate_is_provisional_however_many_runs_it_holds(tmp_path):
    """The audit's case: [reproduced, not testable, not testable] read 'reproduced', not provisional. Now one
    replicate tested it, so it is provisional."""
    from prh.studies import ledger as L

    runs = [_density_ledger(tmp_path, 0, 1.0, 0.001, 6), _density_ledger(tmp_path, 1000, 1.0, 0.0, 2),
            _density_ledger(tmp_path, 2000, 1.0, 0.0, 2)]
    row = L.join(runs[0], runs[1:])["claims"][0]
    assert [e["verdict_registered"] for e in row["per_seed"]] == ["reproduced", "not testable", "not testable"]
    assert row["verdict"] == "reproduced" and row["replicates"] == 1 and row["provisional"] == "one seed: provisional"


def test_reweigh_reads_a_ledger_from_before_the_weighed_verdicts():
    """docs/claims.json's rows as the replicate run wrote them: the registered verdict stays beside the new one, and a
    claim whose unit is the training run counts runs (each replicate's n), not seed labels."""
    from prh.studies import ledger as L

    per = [{"seed": s, "verdict": "not reproduced", "value": r, "interval": None, "p": 1.0, "n": 6, "seeds": 2,
            "effect": None, "note": None} for s, r in ((0, -0.0286), (1000, -0.6), (2000, -0.3714))]
    row = {"id": "convergence.fig03_amended", "study": "convergence", "unit": "training run", "verdict": "not reproduced",
           "seeds": 6, "provisional": None, "value": -0.33, "interval": [-1.05, 0.38], "p": None, "n": 6,
           "note": "replicated", "per_seed": per, "source": "old words", "statement": "old words",
           "statistic": "old words", "rule": "old words"}
    out = L.reweigh({"alpha": 0.05, "claims": [row], "counts": {}})
    new = out["claims"][0]
    spec = {c.key: c for c in L.declared("convergence").claims}["fig03_amended"]
    # the manifest's words now, not those of the code the run ran
    assert (new["source"], new["statement"], new["statistic"], new["rule"]) == (spec.source, spec.statement,
                                                                                 spec.statistic, spec.rule)
    assert new["verdict_registered"] == "not reproduced" and new["verdict"] == "inconclusive"
    assert new["interval"][0] < 0.3 < new["interval"][1]  # the SESOI is inside: never "not reproduced"
    assert new["seeds"] == 18 and new["replicates"] == 3
    assert new["p"] == pytest.approx(min(1, 2 * pooled_spearman([-0.0286, -0.6, -0.3714], [6, 6, 6])["p"]))
    assert out["counts"]["inconclusive"] == 1


def test_the_committed_ledger_obeys_the_rule(repo_root):
    """docs/claims.json: no 'not reproduced' whose interval holds its SESOI (on the claim's signed scale: its
    direction, from its no-effect value); every weighed row has a SESOI, a reason, an MDE (where its n allows one)
    and the registered verdict beside it."""
    import json

    from prh.studies.ledger import declared

    ledger = json.loads((repo_root / "docs" / "claims.json").read_text())
    decisions = {f"{r['study']}.{c.key}": c.decision for r in ledger["claims"] for c in declared(r["study"]).claims}
    weighed_rows = [r for r in ledger["claims"] if r.get("sesoi") is not None]
    assert len(weighed_rows) >= 16
    for r in weighed_rows:
        d = decisions[r["id"]]
        assert d is not None and r["sesoi"] == d["sesoi"], r["id"]
        assert r["sesoi_reason"] and r["verdict_registered"] and r["post_hoc"], r["id"]
        assert r["mde"] is not None, r["id"]
        if r["verdict"] == "not reproduced":
            sign, zero = d.get("direction", 1), d.get("no_effect", 0.0)
            signed = sorted(sign * (v - zero) for v in r["interval"])
            if d["kind"] in ("run_matches", "matches"):  # wholly outside the equivalence margin
                assert signed[0] >= r["sesoi"] or signed[1] <= -r["sesoi"], r["id"]
            else:
                assert signed[1] < r["sesoi"], r["id"]


# --- transfer: the run as unit ----------------------------------------------------------------------------------------

def test_rising_needs_every_step_up():
    """An audit allowed ties in transfer's "rising" rule and no test failed."""
    from prh.studies.transfer.transfer import rising

    assert rising([0.1, 0.2, 0.3]) is True
    assert rising([0.1, 0.2, 0.2]) is False  # a tie is not a rise
    assert rising([0.2, 0.2]) is False
    assert rising([0.3, 0.2, 0.4]) is False


@pytest.mark.parametrize("effects, p, p_less", [
    ([1.0] * 5, 1 / 32, 1.0),  # every run the claimed way: 2^-5
    ([1.0] * 4, 1 / 16, 1.0),
    ([1.0, 1.0, 1.0, 1.0, -1.0], 6 / 32, 31 / 32),  # mean 0.6: patterns with mean >= 0.6 are the 1 + 5 one-flips
    ([0.0, 0.0], 1.0, 1.0),
])
def test_sign_flip_is_exact(effects, p, p_less):
    from prh.stats import sign_flip

    out = sign_flip(effects)
    assert out["p"] == pytest.approx(p) and out["p_less"] == pytest.approx(p_less)
    assert out["min_p"] == 0.5 ** len(effects)
    with pytest.raises(ValueError, match="finite"):
        sign_flip([1.0, math.nan])


@pytest.mark.parametrize("effects, label", [
    ([0.1] * 6, "reproduced"),  # two-sided 2 x 2^-6 = 0.031
    ([0.1] * 5, "not testable"),  # 2 x 2^-5 = 0.0625: five runs cannot reach 0.05 two-sided
    ([-0.1] * 6, "not reproduced"),  # significant the wrong way
    ([0.1, 0.1, 0.1, 0.1, 0.1, -0.1], "inconclusive"),  # p = 2 x 7/64 = 0.22
    ([0.1] * 5 + [math.nan], "not testable"),  # a run that never got there
])
def test_sign_flip_decision_boundaries(effects, label):
    dec = {"kind": "sign_flip", "reason": "r", "set": "s"}
    assert weigh(dec, [{"effects": effects}], alpha=0.05)["verdict"] == label
    assert weigh(dec, [{"value": 1.0}], alpha=0.05)["verdict"] is None  # no per-run effects: the registered rule stands


def _transfer_inputs(runs, lift):
    """Peaks, deep-peaks and Fig 2 records of ``runs`` runs: trained alignment above input and init by ``lift``."""
    base = np.linspace(0.1, 0.2, runs)
    tasks = lambda v: {t: (v + i * 0.01).tolist() for i, t in enumerate(("S", "T1", "T2"))}  # noqa: E731
    auc = {"trained": {"input": tasks(base), "hidden1": tasks(base + lift)}, "init": {"hidden1": tasks(base - 0.05)}}
    per_run = lambda d: {"per_run": {k: (base + d).tolist() for k in  # noqa: E731
                                     ("train_auc", "best_test_mse", "weight_norm_at_50pct")}}
    shallow = {"alignment": {"auc": auc},
               "transfer": {t: {"input": per_run(0.1), "init": per_run(0.1), "trained": per_run(0.0)} for t in ("T1", "T2")}}
    layers = ["input", "hidden1", "hidden2", "hidden3"]
    deep = {"layers": layers, "alignment": {"auc": {s: {l: tasks(base + k * lift) for k, l in enumerate(layers)}
                                                    for s in ("init", "trained")}}}
    fig2 = {"panels": {k: {"auc": (base + d).tolist()} for k, d in
                       (("input_true", 0.3), ("input_shuffled", 0.0), ("init_shuffled", 0.0), ("trained_shuffled", lift))}}
    return shallow, deep, fig2


def test_transfer_effects_are_per_run_and_the_ledger_tests_them():
    from prh.studies.transfer.manifest import results
    from prh.studies.transfer.transfer import run_effects

    shallow, deep, fig2 = _transfer_inputs(6, 0.02)
    eff = run_effects(shallow=shallow, deep=deep, fig2=fig2)
    assert eff["fig10_source_alignment_rises"] == pytest.approx([0.02] * 6)  # trained - max(input, init), per run
    assert eff["fig11_related_faster"] == pytest.approx([0.1] * 6)
    assert eff["fig12_source_alignment_rises_with_depth"] == pytest.approx([0.02] * 6)
    assert eff["fig7_peaks_order_reversed_at_init"] == pytest.approx([-0.02] * 6)  # init rises with depth here
    assert "prop1_closed_form_matches_gd" not in eff and "fig7_order_reversed_at_init" not in eff
    claims = {k: {"verdict": "reproduced", "reproduced": True, "run_effects": v} for k, v in eff.items()}
    claims["prop1_closed_form_matches_gd"] = {"verdict": "reproduced", "reproduced": True, "max_rel_error": 1e-14}
    rows = results("offline", 0.05, metrics={"claims": claims}, peaks={"config": {"runs": 6}})
    assert rows["fig10_source_alignment_rises"]["n"] == rows["fig10_source_alignment_rises"]["seeds"] == 6
    assert rows["prop1_closed_form_matches_gd"]["n"] is None and rows["prop1_closed_form_matches_gd"]["seeds"] is None
    from prh.studies import ledger as L

    spec = {c.key: c for c in L.declared("transfer").claims}
    row = L.weighed({"verdict": "reproduced", "note": None, "seeds": 6,
                     "recorded": {"effects": eff["fig7_peaks_order_reversed_at_init"]}},
                    spec["fig7_peaks_order_reversed_at_init"].decision, 0.05)
    assert row["verdict"] == "not reproduced" and row["verdict_registered"] == "reproduced"
    fig2_row = L.weighed({"verdict": "reproduced", "note": None, "seeds": 5,
                          "recorded": {"effects": [0.1] * 5}}, spec["fig2_input_aligned_with_true_not_shuffled"].decision, 0.05)
    assert fig2_row["verdict"] == "not testable" and fig2_row["n"] == 5  # Fig 2's own 5 runs


# --- checkpoints of a few runs: the run as unit -----------------------------------------------------------------------

def test_checkpoint_run_level_permutes_whole_runs():
    from prh.stats import checkpoint_run_level

    steps = (30, 100, 300)
    names = [f"r{i}_{s}" for i in range(4) for s in steps] + ["r0_0", "r2_0"]  # two untrained step-0 models
    x = [i + s / 1000 for i in range(4) for s in steps] + [9.0, 9.0]
    y = list(x[:12]) + [-5.0, -5.0]  # the untrained points would pull r down if they counted
    out = checkpoint_run_level(names, x, y)
    assert out["runs"] == 4 and out["n"] == 12 and out["spearman_r"] == pytest.approx(1.0)
    assert out["p_greater"] == pytest.approx(1 / 24) and out["p_less"] == pytest.approx(1.0)  # 4! block orders
    assert checkpoint_run_level(["a", "b", "c"], [1, 2, 3], [1, 2, 3])["p_greater"] is None
    uneven = checkpoint_run_level(["r0_30", "r0_100", "r1_30"], [1, 2, 3], [1, 2, 3])
    assert uneven["p_greater"] is None and "no equal runs" in uneven["reason"]


def test_fisher_combination_and_run_level_pooling():
    from prh.pooling import fisher_combined

    assert fisher_combined([0.05]) == pytest.approx(0.05)  # one p: itself
    assert fisher_combined([0.1, 0.1]) == pytest.approx(0.01 * (1 - math.log(0.01)))  # chi^2_4 tail
    with pytest.raises(ValueError, match="p-values"):
        fisher_combined([0.0])
    dec = {**DEC, "runs": 6}
    rows = [{"value": 0.5, "n": 33, "runs": 6, "run_p_greater": 0.02, "run_p_less": 0.99, "run_r": 0.5}] * 3
    out = weigh(dec, rows, alpha=0.05)
    assert out["verdict"] == "reproduced" and out["p"] == pytest.approx(2 * fisher_combined([0.02] * 3))
    one = weigh(dec, rows[:1], alpha=0.05)  # one replicate: two-sided 0.04 < 0.05
    assert one["verdict"] == "reproduced" and one["p"] == pytest.approx(0.04)
    weak = [{**rows[0], "run_p_greater": 0.2, "run_p_less": 0.8}]
    assert weigh(dec, weak, alpha=0.05)["verdict"] == "inconclusive"  # no interval: never "not reproduced" here
    wrong = [{**rows[0], "run_p_greater": 0.999, "run_p_less": 0.002}] * 3
    assert weigh(dec, wrong, alpha=0.05)["verdict"] == "inconclusive"  # significant the wrong way, but no interval
    assert weigh({**DEC, "runs": 3}, [{**rows[0], "runs": 3}], alpha=0.05)["verdict"] == "not testable"  # 2/3! > alpha


def test_fig04_offline_reads_its_run_level_test(tmp_path):
    import json

    from prh.studies import ledger as L

    stats = {"spearman_r": 0.6, "spearman_p": 0.0003, "n": 33,
             "run_level": {"spearman_r": 0.55, "p_greater": 0.0139, "p_less": 0.99, "runs": 6, "n": 30}}
    path = tmp_path / "downstream" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"strongest_vision": "v", "tasks": {"shapes_mc_acc_norm": stats}}))
    row = L.build({"downstream": {"metrics": path}}, "offline", 0.05, 0)["claims"][0]
    assert row["verdict_registered"] == "reproduced" and row["verdict"] == "reproduced"
    assert row["p"] == pytest.approx(0.0278) and row["recorded"]["runs"] == 6
    paper = L.build({"downstream": {"metrics": path}}, "paper", 0.05)["claims"][0]
    assert "run-level" not in paper["method"] and paper["recorded"]["runs"] is None  # public models: independent


def test_validity_gates_are_not_counted_among_the_claims():
    import json

    from prh.studies import ledger as L

    gate = {"id": "convergence.fig03_world_gate", "study": "convergence", "unit": "training run",
            "verdict": "not reproduced", "seeds": 6, "provisional": None, "value": 0.0, "interval": None, "p": None,
            "n": 6, "note": None, "source": "s", "statistic": "fraction", "rule": "r"}
    claim = {**gate, "id": "convergence.fig02_competence", "verdict": "inconclusive", "n": 14, "value": 0.5}
    out = L.reweigh({"suite": "offline", "alpha": 0.05, "claims": [gate, claim], "counts": {}})
    assert [r["validity_gate"] for r in out["claims"]] == [True, False]
    assert out["counts"]["not reproduced"] == 0  # the gate's label is not a claim's
    text = L.table(out)
    assert "Validity gates, not counted: `convergence.fig03_world_gate` not reproduced" in text.splitlines()[0]
    assert "| `convergence.fig03_world_gate` |" not in text
    json.dumps(out)


def test_phase_c1_shows_its_medians_and_t1_chaotic_is_c2c():
    from prh.studies.phase.manifest import results

    claims = {"C1_alignment_gap": {"statistic": 0.2, "p_value": 0.001, "verdict": "not reproduced",
                                   "median_cross": 0.041, "median_within_vision": 0.95, "median_within_language": 0.62},
              "C2c_every_vision_family_below_chaotic": {"statistic": 0.65, "verdict": "not reproduced"},
              "T1_every_family_chaotic": {"statistic": 0.65, "verdict": "not reproduced"}}
    out = results("offline", 0.05, metrics={"claims": claims, "n_cross_pairs": 98, "n_models": 21})
    assert "median retrieval cross 0.041 (rule: < cross_max)" in out["C1"]["note"]
    assert "language 0.62 (rule: > within_min)" in out["C1"]["note"]
    assert "T1_chaotic" not in out and out["C2c"]["value"] == 0.65


# --- run_mean / run_matches: one statistic per independent run, the run as unit -------------------------------------

RUN = {"kind": "run_mean", "sesoi": 0.05, "reason": "test", "set": "2026-11-27"}


def test_replicate_mean_is_a_one_sample_t_over_runs_without_their_own_p():
    from scipy.stats import ttest_1samp

    from prh.pooling import replicate_mean

    got = replicate_mean([0.1, 0.12, 0.08], level=0.95, alpha=0.05)
    ref = ttest_1samp([0.1, 0.12, 0.08], 0.0)
    assert got["p"] == pytest.approx(ref.pvalue) and got["k"] == 3
    half = 4.302652729911275 * 0.02 / math.sqrt(3)  # t_{0.975, 2} x sd / sqrt(3)
    assert got["interval"] == pytest.approx([0.1 - half, 0.1 + half])
    # MDE at 80 %: (t_{0.975,2} + t_{0.8,2}) x se
    assert got["mde"] == pytest.approx((4.302652729911275 + 1.0606601717798212) * 0.02 / math.sqrt(3))
    assert replicate_mean([0.3]) is None  # one run: no run-level test


def test_replicate_mean_weighs_each_run_s_own_p_by_random_effects():
    from prh.pooling import random_effects, replicate_mean

    ys, ps = [0.18, 0.17, 0.12], [0.29, 0.25, 0.4]
    got = replicate_mean(ys, ps, level=0.95)
    own = weigh({**RUN, "sesoi": 0.3, "own_p": True}, [{"value": y, "p": q} for y, q in zip(ys, ps)], alpha=0.05)
    assert own["p"] == pytest.approx(got["p"]) and own["verdict"] == "inconclusive"
    assert weigh({**RUN, "sesoi": 0.3}, [{"value": y, "p": q} for y, q in zip(ys, ps)], alpha=0.05)["p"] < 0.05
    z = [NormalDist().inv_cdf(1 - p / 2) for p in ps]
    ref = random_effects(ys, [y / q for y, q in zip(ys, z)], level=0.95)
    assert got["interval"] == pytest.approx(ref["interval"]) and got["p"] == pytest.approx(ref["p"])
    # the runs agree closely, but each run's own test is weak: the pooled p stays far above alpha, where a t over
    # the three values alone would call it significant
    assert got["p"] > 0.05 and replicate_mean(ys)["p"] < 0.05


def test_run_mean_verdicts_at_every_boundary():
    strong = [{"value": v, "n": 21} for v in (0.2, 0.21, 0.19)]
    assert weigh(RUN, strong, alpha=0.05)["verdict"] == "reproduced"
    wrong = [{"value": v} for v in (-0.2, -0.21, -0.19)]  # significant the wrong way: the interval lies below SESOI
    assert weigh(RUN, wrong, alpha=0.05)["verdict"] == "not reproduced"
    tiny = [{"value": v} for v in (0.001, -0.001, 0.0005)]  # the interval excludes 0.05 from below
    got = weigh(RUN, tiny, alpha=0.05)
    assert got["interval"][1] < 0.05 and got["verdict"] == "not reproduced"
    noisy = [{"value": v} for v in (0.3, -0.2, 0.1)]  # the interval holds the SESOI and 0
    assert weigh(RUN, noisy, alpha=0.05)["verdict"] == "inconclusive"
    assert weigh(RUN, [{"value": 0.3}], alpha=0.05)["verdict"] is None  # one run: the registered verdict stands


def test_run_mean_reads_its_no_effect_value_and_direction():
    below = {**RUN, "no_effect": 0.5, "direction": -1}  # "the largest family mean lies below 0.5"
    got = weigh(below, [{"value": v} for v in (0.3, 0.31, 0.29)], alpha=0.05)
    assert got["verdict"] == "reproduced" and got["value"] == pytest.approx(0.3)
    assert got["interval"][0] < 0.3 < got["interval"][1] < 0.5  # shown on the recorded scale
    above = [{"value": v} for v in (0.6, 0.62, 0.58)]
    assert weigh(below, above, alpha=0.05)["verdict"] == "not reproduced"


def test_run_matches_is_an_equivalence_test_at_the_sesoi():
    flat = {**RUN, "kind": "run_matches", "sesoi": 0.05}
    assert weigh(flat, [{"value": v} for v in (0.001, -0.002, 0.0)], alpha=0.05)["verdict"] == "reproduced"
    assert weigh(flat, [{"value": v} for v in (-0.1, -0.11, -0.09)], alpha=0.05)["verdict"] == "not reproduced"
    assert weigh(flat, [{"value": v} for v in (-0.04, 0.0, -0.08)], alpha=0.05)["verdict"] == "inconclusive"


def test_a_decision_null_must_be_finite():
    with pytest.raises(ValueError, match="no_effect must be a finite number"):
        check_decision({**RUN, "no_effect": float("nan")})


# --- the 21 claims without a decision (decided 2026-11-27 with the second amendment): the engine's parts they need ---

def test_a_decision_note_says_why_no_test_is_made():
    """descriptive keeps its default note (shared models) unless the decision says why itself; tolerance (a
    numerical check) must say it, and a note must not be blank."""
    desc = {"kind": "descriptive", "reason": "r", "set": "s"}
    assert "share models" in weigh(desc, [{"value": 0.4, "n": 462}], alpha=0.05)["note"]
    own = weigh({**desc, "note": "one language model"}, [{"value": 0.4, "n": 15}], alpha=0.05)
    assert own["note"] == "one language model" and own["verdict"] == "not testable" and own["value"] == 0.4
    with pytest.raises(ValueError, match="non-empty 'note'"):
        check_decision({**desc, "note": " "})
    with pytest.raises(ValueError, match="non-empty 'note'"):
        check_decision({**desc, "kind": "tolerance"})  # a numerical check must say what it checks
    with pytest.raises(ValueError, match="unknown keys"):
        check_decision({**desc, "notes": "x"})


def test_a_numerical_check_keeps_its_tolerance_rule():
    """transfer.prop1: a closed form against gradient descent, a tolerance and no runs: no statistical test is
    pretended; the registered verdict stands, and the row says it is a numerical check."""
    from prh.studies import ledger as L

    dec = {"kind": "tolerance", "reason": "r", "set": "s", "note": "numerical check: error < 1e-8"}
    assert check_decision(dec) is dec  # no SESOI needed
    got = weigh(dec, [{"value": 1e-14, "n": None}], alpha=0.05)
    assert got["verdict"] is None and got["p"] is None and got["mde"] is None
    row = L.weighed({"verdict": "reproduced", "note": None, "seeds": None, "recorded": {"value": 1e-14}}, dec, 0.05)
    assert row["verdict"] == "reproduced" and row["method"] == "registered rule (numerical check: error < 1e-8)"
    failed = L.weighed({"verdict": "not reproduced", "note": None, "seeds": None, "recorded": {"value": 1e-3}}, dec, 0.05)
    assert failed["verdict"] == "not reproduced"  # the tolerance rule's own label, either way


def test_a_correlation_whose_records_lack_n_keeps_its_registered_verdict():
    """colour's rows of docs/claims.json record no n: the decision cannot be read from them, so the registered verdict
    stands (said so) rather than turning 'not testable'."""
    from prh.studies import ledger as L

    assert weigh(DEC, [{"value": 0.68, "p": 0.001, "n": None}], alpha=0.05)["verdict"] is None
    row = L.weighed({"verdict": "reproduced", "note": None, "seeds": None,
                     "recorded": {"value": 0.68, "p": 0.001, "n": None}}, DEC, 0.05)
    assert row["verdict"] == "reproduced" and "no replicate states r and n" in row["method"] and row["sesoi"] is None


def test_every_run_exactly_at_no_effect_is_no_test():
    """phase C4 in docs/claims.json: a rule that never fires scores balanced accuracy 0.5 by construction in every
    run; t = 0/0 is no test, not a zero-width interval that would read 'not reproduced'."""
    from prh.pooling import replicate_mean

    assert replicate_mean([0.0, 0.0, 0.0]) is None
    assert replicate_mean([0.25, 0.25, 0.25])["p"] == 0.0  # identical and away from 0: t is infinite, p 0
    dec = {**RUN, "sesoi": 0.1, "no_effect": 0.5}
    assert weigh(dec, [{"value": 0.5, "p": 1.0}] * 3, alpha=0.05)["verdict"] is None
    assert weigh({**dec, "own_p": True}, [{"value": 0.5, "p": 1.0}] * 3, alpha=0.05)["verdict"] is None
    assert weigh(dec, [{"value": v} for v in (0.5, 0.51, 0.49)], alpha=0.05)["verdict"] == "not reproduced"


# --- the claims that had no decision: what each row now states and how it is weighed ------------------------------

def _decision(study, key):
    from prh.studies.ledger import declared

    return {c.key: c for c in declared(study).claims}[key].decision


def _replicated(study, key, entries, registered="reproduced"):
    """``weighed`` of a joined row: one ``recorded`` entry per replicate, as ``join`` and ``reweigh`` pass them."""
    from prh.studies import ledger as L

    return L.weighed({"verdict": registered, "note": None, "seeds": len(entries)}, _decision(study, key), 0.05,
                     [{"gate": True, **e} for e in entries])


def test_colour_is_weighed_by_its_mantel_test_with_the_colour_as_unit():
    """fig08: the Spearman r of distances over colour pairs; the Mantel relabelling permutes colours, so the pooled
    test reads its two one-sided p and the MDE is that of 20 colours, never of 190 pairs."""
    from prh.studies.color.manifest import results
    from prh.studies.color.pmi import distance_agreement

    d = np.arange(15, dtype=float)  # 6 items: 15 distances
    same = distance_agreement(d, d, permutations=50)
    assert same["p_less"] == 1.0 and same["items"] == 6 and same["distance_pairs"] == 15
    panel = {"spearman": 0.06, "p_value": 0.21, "p_less": 0.8, "procrustes_residual": 0.5, "items": 20,
             "distance_pairs": 190}
    rows = results("offline", 0.05, metrics={"vision_pmi": {**panel, "spearman": 0.68, "p_value": 0.001,
                                                            "p_less": 1.0}, "language_minilm": panel})
    lang = rows["fig08_language"]
    assert lang["n"] == 190 and lang["runs"] == 20 and lang["run_p_greater"] == 0.21 and lang["run_p_less"] == 0.8
    dec = _decision("color", "fig08_language")
    got = weigh(dec, [{**lang, "value": lang["value"]}], alpha=0.05)
    assert got["verdict"] == "inconclusive" and got["p"] == pytest.approx(0.42)  # no interval: never "not reproduced"
    assert got["mde"] == pytest.approx(mde_correlation([20], alpha=0.05)) != mde_correlation([190], alpha=0.05)
    vision = weigh(dec, [rows["fig08_vision"]], alpha=0.05)
    assert vision["verdict"] == "reproduced" and vision["p"] == pytest.approx(0.002)
    edge = weigh(dec, [{**lang, "run_p_greater": 0.026, "run_p_less": 0.99}], alpha=0.05)
    assert edge["verdict"] == "inconclusive"  # two-sided 0.052: the one-sided p is doubled
    old = results("offline", 0.05, metrics={"vision_pmi": {k: panel[k] for k in ("spearman", "p_value",
                                                                                "procrustes_residual")}})
    assert old["fig08_vision"]["n"] is None and "runs" not in old["fig08_vision"]  # the pairs never count as units
    assert weigh(dec, [old["fig08_vision"]], alpha=0.05)["verdict"] is None  # a metrics.json from before: registered


def test_phase_c4_pools_balanced_accuracies_over_runs_and_never_a_rule_that_cannot_fire():
    from prh.studies.phase.manifest import results

    def metrics(ba, rate):
        c4 = {"statistic": ba, "p_value": 0.01 if rate not in (0.0, 1.0) else 1.0, "predicted_failure_rate": rate,
              "verdict": "reproduced" if rate not in (0.0, 1.0) else "not testable"}
        return {"claims": {"C4a_agop_ratio_rule": c4, "C4b_combined_rule": c4}, "n_cross_pairs": 98, "n_models": 21}

    never = results("offline", 0.05, metrics=metrics(0.5, 0.0))["C4a"]
    assert never["value"] is None and never["p"] is None and "one class for every pair" in never["note"]
    fires = results("offline", 0.05, metrics=metrics(0.7, 0.3))["C4b"]
    assert fires["value"] == 0.7 and fires["p"] == 0.01
    up = _replicated("phase", "C4a", [{"value": v} for v in (0.72, 0.75, 0.70)])
    assert up["verdict"] == "reproduced" and up["interval"][0] > 0.5  # on the balanced-accuracy scale, chance 0.5
    near = _replicated("phase", "C4a", [{"value": v} for v in (0.52, 0.55, 0.53)])
    assert near["interval"][1] < 0.6 and near["verdict"] == "not reproduced"  # below chance + the SESOI 0.1
    wide = _replicated("phase", "C4a", [{"value": v} for v in (0.52, 0.61, 0.53)])
    assert wide["interval"][1] > 0.6 and wide["verdict"] == "inconclusive"
    # docs/claims.json's records: 0.5 in every run (the rule never fired): no test, the registered verdict stands
    old = _replicated("phase", "C4b", [{"value": 0.5, "p": 1.0, "n": 98}] * 3, registered="not testable")
    assert old["verdict"] == "not testable" and old["sesoi"] is None and "t = 0/0" in old["method"]
    # one replicate whose rule never fired is left out, not pooled as chance
    mixed = _replicated("phase", "C4a", [{"value": None}, {"value": 0.72}, {"value": 0.74}])
    assert mixed["replicates"] == 2


def test_phase_claims_the_seed_does_not_specify_are_descriptive_and_say_so():
    for key in ("T2_phase_regularisation", "T2_compatible_init", "F3_information_ratio"):
        row = _replicated("phase", key, [{"value": None, "n": 21}] * 3, registered="not testable")
        assert row["verdict"] == "not testable" and row["method"] == "descriptive"
        assert row["note"].startswith("not built") and "share models" not in row["note"]


def test_bridge_appendix_a_is_one_value_per_run_and_fig2_has_one_language_model():
    from prh.studies.bridge.manifest import results

    arms = {f"a{i}": {"before": 0.5, "after": 0.5 - m, "null_q05": 0.6, "aligned": m > 0}
            for i, m in enumerate((0.1, 0.08, 0.12, 0.1, 0.09, 0.11))}
    fig2 = {"language_pretrained": {"minilm": 0.004}, "vision_trained": {"v1": 0.001, "v2": 0.002},
            "verdict": "reproduced"}
    rows = results("offline", 0.05, metrics={"claims": {"appA_covariance_alignment": {"arms": arms,
                                                                                     "verdict": "reproduced"},
                                                        "fig2_outliers": fig2}})
    a = rows["appA_covariance_alignment"]
    assert a["value"] == pytest.approx(0.1) and a["n"] == 6 and a["seeds"] == 1  # six arms, one run
    assert rows["fig2_outliers"]["value"] == pytest.approx(0.002) and rows["fig2_outliers"]["n"] == 3
    clear = _replicated("bridge", "appA_covariance_alignment", [{"value": v, "n": 6} for v in (0.1, 0.09, 0.11)])
    assert clear["verdict"] == "reproduced" and clear["replicates"] == 3  # three runs, not 18 arms
    small = _replicated("bridge", "appA_covariance_alignment", [{"value": v} for v in (0.01, -0.005, 0.002)])
    assert small["interval"][1] < 0.05 and small["verdict"] == "not reproduced"  # no move of 5 % of the mass
    held = _replicated("bridge", "appA_covariance_alignment", [{"value": v} for v in (0.01, 0.06, 0.03)])
    assert held["interval"][1] > 0.05 and held["verdict"] == "inconclusive"
    assert _replicated("bridge", "appA_covariance_alignment", [{"value": None, "n": 6}] * 3)["verdict"] == "reproduced"
    out = _replicated("bridge", "fig2_outliers", [{"value": 0.002, "n": 15}] * 3)
    assert out["verdict"] == "not testable" and "one language-pretrained model" in out["note"]
    assert out["value"] == pytest.approx(0.002)


def test_transfer_fig7_on_the_digits_is_tested_run_by_run():
    from prh.studies.transfer.emergence import run_emergence
    from prh.studies.transfer.manifest import results
    from prh.studies.transfer.transfer import run_effects

    layers = ["input", "hidden1", "hidden2", "hidden3"]

    def fig7(trained, init):
        return {"layers": layers, **{s: {l: {"auc": {"mean": [float(np.mean(col))]}, "auc_runs": list(col)}
                                        for l, col in zip(layers, np.asarray(m, dtype=float).T)}
                                    for s, m in (("trained", trained), ("init", init))}}

    trained = [[0.5, 0.6, 0.7, 0.8]] * 5 + [[0.5, 0.6, 0.55, 0.8]]  # the sixth run: hidden2 falls
    init = [[0.8, 0.7, 0.6, 0.5]] * 6
    shallow, deep, fig2 = _transfer_inputs(6, 0.02)
    eff = run_effects(shallow=shallow, deep=deep, fig2=fig2, fig7=fig7(trained, init))
    assert eff["fig7_later_layers_better_after_training"] == pytest.approx([0.1] * 5 + [-0.05])
    assert eff["fig7_order_reversed_at_init"] == pytest.approx([0.1] * 6)
    means_only = fig7(trained, init)
    for s in ("init", "trained"):
        for layer in layers:
            del means_only[s][layer]["auc_runs"]
    assert "fig7_order_reversed_at_init" not in run_effects(shallow=shallow, deep=deep, fig2=fig2, fig7=means_only)
    claims = {k: {"verdict": "reproduced", "reproduced": True, "run_effects": v} for k, v in eff.items()}
    rows = results("offline", 0.05, metrics={"claims": claims}, peaks={"config": {"runs": 6}})
    assert rows["fig7_order_reversed_at_init"]["n"] == 6
    dec = _decision("transfer", "fig7_order_reversed_at_init")
    assert weigh(dec, [rows["fig7_order_reversed_at_init"]], alpha=0.05)["verdict"] == "reproduced"
    assert weigh(dec, [{"effects": [0.1] * 5}], alpha=0.05)["verdict"] == "not testable"  # the default 5 runs
    mixed = weigh(_decision("transfer", "fig7_later_layers_better_after_training"),
                  [rows["fig7_later_layers_better_after_training"]], alpha=0.05)
    assert mixed["verdict"] == "inconclusive"  # one run the other way: p = 2 x 2/64
    _, f7 = run_emergence(x=np.random.default_rng(0).normal(size=(40, 6)), y=np.arange(40) % 2, runs=2,
                          fig2_epochs=1, fig7_width=4, max_epochs=1, num_taus=5, spectrum_points=3)
    for layer in layers:
        assert np.mean(f7["trained"][layer]["auc_runs"]) == pytest.approx(f7["trained"][layer]["auc"]["mean"][0])


def test_proposition_1_is_a_numerical_check_not_a_test():
    from prh.studies import ledger as L

    dec = _decision("transfer", "prop1_closed_form_matches_gd")
    assert dec["kind"] == "tolerance" and "sesoi" not in dec and "1e-8" in dec["note"]
    for label, err in (("reproduced", 1e-14), ("not reproduced", 1e-3)):
        row = L.weighed({"verdict": label, "note": None, "seeds": None, "recorded": {"value": err, "n": None}}, dec, 0.05)
        assert row["verdict"] == label and row["method"].startswith("registered rule (numerical check")


@pytest.mark.parametrize("key, runs", [("fig2.2_random_nets", 2048), ("fig7.1_products", 32), ("fig2.6_trained", 5)])
def test_simplicity_points_are_clustered_in_their_samples(key, runs):
    """The depths of one sample (one network, one product, one task) are not independent: the unit is the sample,
    and no test with it as unit is recorded, so a strong fall over the points is inconclusive, not reproduced."""
    dec = _decision("simplicity", key)
    assert dec["runs"] == runs and dec["direction"] == -1 and dec["sesoi"] == 0.3
    got = weigh(dec, [{"value": -0.9, "p": 0.0, "n": runs * 8}], alpha=0.05)
    assert got["verdict"] == "inconclusive" and got["mde"] == pytest.approx(mde_correlation([runs], alpha=0.05))
    assert "clustered in" in got["note"]


def _lte_metrics(lte_ls=12.0, lte_vit=40.0, accs=((0.80, 0.78), (0.76, 0.75)), ls="not reproduced"):
    rank = {"least_squares": {"lte_min": lte_ls, "lora_max": 3.9, "r": 4},
            "vit": {"standard": 60.0, "lora": 7.5, "lora_merge": 30.0, "lte": lte_vit}, "vit_r": 8,
            "verdict": "reproduced"}
    rows = [{"heads": n, "merge_every": t, "test_accuracy": a} for n, pair in zip((4, 32), accs)
            for t, a in zip((10, 50), pair)]
    return {"least_squares": {"verdict": ls}, "update_rank": rank, "head_orthogonality": {"verdict": "reproduced"},
            "merge_interval": {"rows": rows, "verdict": "reproduced"}}


def test_lte_rows_state_one_number_per_run():
    from prh.studies.lte.manifest import results

    rows = results("offline", 0.05, metrics=_lte_metrics())
    assert rows["update_rank"]["value"] == pytest.approx(12.0 / 8)  # least squares' LTE / 2r is the smallest ratio
    assert results("offline", 0.05, metrics=_lte_metrics(lte_vit=20.0))["update_rank"]["value"] == pytest.approx(20 / 16)
    broken = _lte_metrics()
    broken["update_rank"]["least_squares"]["lora_max"] = 5.0  # LoRA's bound (<= r = 4) broken: its ratio enters
    assert results("offline", 0.05, metrics=broken)["update_rank"]["value"] == pytest.approx(4 / 5)
    assert rows["merge_interval"]["value"] == pytest.approx(0.01)  # 0.76 -> 0.75 at 32 heads
    assert rows["least_squares"]["effects"] == [-1.0] and rows["head_orthogonality"]["effects"] == [1.0]
    up = results("offline", 0.05, metrics=_lte_metrics(accs=((0.78, 0.80), (0.76, 0.75))))
    assert up["merge_interval"]["value"] == pytest.approx(-0.02)  # a rise with T: below 0


def test_lte_decisions_read_the_run_as_unit():
    rank = [{"value": v} for v in (1.5, 1.6, 1.45)]
    assert _replicated("lte", "update_rank", rank)["verdict"] == "reproduced"  # against the line, 1
    at_line = _replicated("lte", "update_rank", [{"value": v} for v in (1.02, 0.97, 1.0)])
    assert at_line["interval"][1] < 1.25 and at_line["verdict"] == "not reproduced"  # below the line + SESOI 0.25
    falls = _replicated("lte", "merge_interval", [{"value": v} for v in (0.002, -0.001, 0.0)])
    assert falls["interval"][1] < 0.01 and falls["verdict"] == "not reproduced"  # under one point at every step
    assert _replicated("lte", "merge_interval", [{"value": v} for v in (0.03, 0.04, 0.035)])["verdict"] == "reproduced"
    for key in ("least_squares", "head_orthogonality"):
        three = _replicated("lte", key, [{"effects": [-1.0]}] * 3, registered="not reproduced")
        assert three["verdict"] == "not testable" and three["n"] == 3  # 2 x 2^-3: three runs cannot reach alpha
        six = weigh(_decision("lte", key), [{"effects": [-1.0]}] * 6, alpha=0.05)
        assert six["verdict"] == "not reproduced"  # six runs failing: p = 2 / 64
        assert _replicated("lte", key, [{"value": None}] * 3, registered="not reproduced")["verdict"] == "not reproduced"


def test_kernel_tracks_models_is_a_co_movement_run_by_run():
    from prh.studies.sample_size.manifest import results

    def claims(mk, mm):
        return {"claims": {"kernel_tracks_models": {"value": mk, "model_model_change": mm, "n": 14,
                                                    "verdict": "reproduced"}}}

    assert results("offline", 0.05, metrics=claims(-0.03, -0.05))["kernel_tracks_models"]["effects"] == [0.03]
    assert results("offline", 0.05, metrics=claims(-0.03, 0.01))["kernel_tracks_models"]["effects"] == [-0.01]
    assert "effects" not in results("offline", 0.05, metrics=claims(-0.03, None))["kernel_tracks_models"]
    dec = _decision("sample_size", "kernel_tracks_models")
    assert weigh(dec, [{"effects": [0.03]}] * 3, alpha=0.05)["verdict"] == "not testable"
    assert weigh(dec, [{"effects": [0.03]}] * 6, alpha=0.05)["verdict"] == "reproduced"
    assert weigh(dec, [{"effects": [-0.01]}] * 6, alpha=0.05)["verdict"] == "not reproduced"
    # docs/claims.json holds the model-kernel change as value and no effects: the registered verdict stands
    old = _replicated("sample_size", "kernel_tracks_models", [{"value": -0.03, "n": 14}] * 3)
    assert old["verdict"] == "reproduced" and "no per-run effects" in old["method"]
