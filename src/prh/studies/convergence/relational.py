"""The relational language test, as pre-registered in ``params.yaml`` (``convergence.relational``, 2026-11-27).

The unit is the training run (its final checkpoint); its checkpoints 300 / 1000 only trace its trajectory. Per run r
of size s (``family``):

* predictor x_r: relational multiple-choice accuracy of its final checkpoint on held-out scenes (``prh
  score-relational``, ``results/experiments/zoo/relational.json``);
* outcome y_r = c(final_r) - c(untrained_s), c = calibrated alignment (score minus the mean null maximum, averaged
  over the vision set; ``prh.studies.convergence.preregistered.calibrated_outcomes``), the untrained model of its size
  its step-0 checkpoint;
* test: the sum over sizes of Spearman r(x, y), each size's runs permuted alone (``prh.pooling.pooled_spearman``),
  two-sided, weighed by the issue-47 rule (``prh.claims.weigh``, kind correlation) at the SESOI;
* power: ``prh.pooling.pooled_spearman_power`` at the registered effect and these strata;
* gate: at least one run's final checkpoint passes the left-most swap gate (``prh.evaluation.relational``); if none
  does, the test is "not testable" (the registration says so), with the reason;
* competence first: accuracy against chance, and by data mix (the mix is the designed lever), reported before the
  alignment is read.
"""

from __future__ import annotations

import argparse

import numpy as np

from prh.claims import verdict, weigh
from prh.pooling import pooled_spearman, pooled_spearman_power
from prh.stats import spearman_permutation
from prh.studies.convergence.preregistered import calibrated_outcomes

__all__ = ["relational_runs", "relational_test", "claim_decision", "main"]


def claim_decision() -> dict:
    """The ledger's decision for this claim (the convergence manifest's ``relational``: kind, SESOI, strata), so that
    the command and the ledger weigh it by one rule."""
    from prh.studies.ledger import declared

    return next(c.decision for c in declared("convergence").claims if c.key == "relational")


def _per_size(points: list[dict], key: str, families: list[str], seed: int) -> dict:
    """Each size's two-sided Spearman r of ``key`` against the gain, with its n (r undefined where ``key`` is
    constant over the size's runs)."""
    strata = {}
    for fam in families:
        pts = [p for p in points if p["family"] == fam]
        x, y = [p[key] for p in pts], [p["gain"] for p in pts]
        if len(set(x)) == 1:
            strata[fam] = {"n": len(pts), "spearman_r": None, "note": f"every run at the same {key}: r undefined"}
            continue
        res = spearman_permutation(x, y, permutations=10000, alternative="two-sided", seed=seed)
        strata[fam] = {"n": len(pts), "spearman_r": res["spearman_r"], "p_two_sided": res["p_permutation"]}
    return strata


def relational_runs(zoo: dict, model_set: list[str]) -> dict[str, dict]:
    """The test's units from the config's ``zoo.language`` runs: every run whose checkpoints are all in
    ``model_set``, with a step-0 model of its ``family`` in it too: {run: {"final", "untrained", "family", "mix",
    "checkpoints": [(step, model), ...]}}, the mix being the run's ``relational`` share (0 without the key)."""
    members = set(model_set)
    untrained = {spec.get("family"): f"{run}_0" for run, spec in zoo.items()
                 if 0 in (spec.get("checkpoints") or []) and f"{run}_0" in members}
    out = {}
    for run, spec in zoo.items():
        steps = sorted(k for k in spec.get("checkpoints") or [] if k > 0)
        if steps and spec.get("family") in untrained and all(f"{run}_{k}" in members for k in steps):
            out[run] = {"final": f"{run}_{steps[-1]}", "untrained": untrained[spec["family"]],
                        "family": spec["family"], "mix": float(spec.get("relational") or 0.0),
                        "checkpoints": [(k, f"{run}_{k}") for k in steps]}
    return out


def _competence(points: list[dict], families: list[str]) -> dict:
    """Is the predictor a competence the runs differ in? Accuracy against chance, and Spearman r of the data mix
    against accuracy per size (descriptive: the mix is the designed lever, not the claim)."""
    acc = np.array([p["accuracy"] for p in points])
    chance = np.array([p["chance"] for p in points])
    by_mix = {}
    for p in points:
        by_mix.setdefault(f"{p['family']} mix {p['mix']:g}", []).append(p["accuracy"])
    mix_r = {}
    for fam in families:
        pts = [p for p in points if p["family"] == fam]
        if len({p["mix"] for p in pts}) > 1 and len({p["accuracy"] for p in pts}) > 1:
            res = spearman_permutation([p["mix"] for p in pts], [p["accuracy"] for p in pts], permutations=10000,
                                       alternative="greater", seed=0)
            mix_r[fam] = {"spearman_r": res["spearman_r"], "p_greater": res["p_permutation"], "n": len(pts)}
    return {"accuracy_mean": float(acc.mean()), "chance_mean": float(chance.mean()),
            "runs_above_chance": int(np.sum(acc > chance)), "accuracy_range": [float(acc.min()), float(acc.max())],
            "by_mix": {k: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)), "n": len(v)}
                       for k, v in sorted(by_mix.items())},
            "mix_vs_accuracy": mix_r}


def _secondary(points: list[dict], bpb: dict | None, families: list[str], seed: int) -> dict:
    """The registered secondary predictor, reported and not in the verdict: the reducible fraction of bits per byte
    (``prh eval-lm``) of each run's final checkpoint against its gain, per size and pooled as the primary is."""
    models = (bpb or {}).get("models") or {}
    if not all(p["final"] in models for p in points):
        return {"note": "not computed: no bits per byte of every final checkpoint"}
    for p in points:
        p["reducible_fraction"] = float(models[p["final"]]["reducible_fraction"])
    strata = _per_size(points, "reducible_fraction", families, seed)
    defined = [s for s in strata.values() if s["spearman_r"] is not None]
    if not defined:
        return {"predictor": "reducible fraction of bits per byte (final checkpoint)", "strata": strata}
    pooled = pooled_spearman([s["spearman_r"] for s in defined], [s["n"] for s in defined], seed=seed)
    return {"predictor": "reducible fraction of bits per byte (final checkpoint)", "strata": strata,
            "pooled_r": pooled["mean_r"], "p": pooled["p"]}


def relational_test(*, relational: dict, cross: dict, runs: dict[str, dict], vision_models: list[str], alpha: float,
                    sesoi: float, effect: float, seed: int = 0, power_sims: int = 4000, bpb: dict | None = None) -> dict:
    """The registered test (module docstring) on ``runs`` (``relational_runs``), ``relational`` (``prh
    score-relational``'s JSON), ``cross`` (a ``prh align`` table, the language set against ``vision_models``, with its
    permutation null). Returns the points, each size's r, the pooled verdict, the power, the gate and competence."""
    scored = relational.get("models") or {}
    missing = sorted({r["final"] for r in runs.values()} - set(scored))
    if missing:
        raise ValueError(f"final checkpoints {missing} have no relational score: rerun `prh score-relational` on them")
    families = sorted({r["family"] for r in runs.values()})
    sizes = {f: sum(r["family"] == f for r in runs.values()) for f in families}
    if not runs or min(sizes.values()) < 3:
        raise ValueError(f"every size needs at least 3 runs with an untrained reference, got {sizes}")
    models = list(dict.fromkeys(m for r in runs.values() for m in [r["untrained"], *(n for _, n in r["checkpoints"])]))
    calibrated = calibrated_outcomes(cross=cross, language_models=models, vision_models=vision_models)
    points = []
    for run, r in runs.items():
        s = scored[r["final"]]
        base = calibrated[r["untrained"]]
        points.append({"run": run, "family": r["family"], "mix": r["mix"], "final": r["final"],
                       "untrained": r["untrained"], "accuracy": float(s["accuracy"]), "chance": float(s["chance"]),
                       "gate_passed": bool(s["gate"]["passed"]), "final_outcome": calibrated[r["final"]],
                       "untrained_outcome": base, "gain": calibrated[r["final"]] - base,
                       "trajectory": [{"step": 0, "outcome": base, "accuracy": scored.get(r["untrained"], {}).get("accuracy")}]
                       + [{"step": k, "outcome": calibrated[n], "accuracy": scored.get(n, {}).get("accuracy")}
                          for k, n in r["checkpoints"]]})
    strata = _per_size(points, "accuracy", families, seed)
    passing = sorted(p["final"] for p in points if p["gate_passed"])
    decision = {**claim_decision(), "sesoi": sesoi}
    pooled = weigh(decision, [{"value": s["spearman_r"], "n": s["n"]} for s in strata.values()], alpha=alpha)
    note = pooled.get("note")
    if not passing:  # the registration: no final checkpoint follows the swap -> not testable
        pooled["verdict"] = verdict(None)
        note = "no run's final checkpoint passes the left-most swap gate: the predictor does not read the relation"
    ns = [sizes[f] for f in families]
    return {
        "unit": "training run (its final checkpoint)", "n": len(points), "strata": strata,
        "predictor": "relational multiple-choice accuracy on held-out scenes (final checkpoint)",
        "outcome": "calibrated alignment of the final checkpoint minus the untrained same-size model's",
        "vision_models": list(vision_models), "points": points,
        "competence": _competence(points, families), "secondary": _secondary(points, bpb, families, seed),
        "gate": {"passed": bool(passing), "n_passed": len(passing), "passing": passing,
                 "n_runs": len(points)},
        "power": {"effect": effect, "alpha": alpha, "ns": ns, "sims": power_sims,
                  "power": pooled_spearman_power(ns, effect, alpha=alpha, sims=power_sims, seed=seed)},
        "weighed": {**pooled, "note": note}, "verdict": pooled["verdict"],
        "settings": {"alpha": alpha, "sesoi": sesoi, "effect": effect, "seed": seed,
                     "null_permutations": (cross.get("calibration") or {}).get("permutations")},
    }


def main(argv: list[str] | None = None) -> None:
    from prh.errors import UsageError
    from prh.io import json_object, read_json, write_json
    from prh.slices import add_slice
    from prh.studies.convergence.design import RELATIONAL_CONFIG

    p = argparse.ArgumentParser(prog="prh relational-test", description=__doc__.splitlines()[0])
    p.add_argument("--relational", required=True, help="prh score-relational's JSON (results/experiments/zoo/relational.json)")
    p.add_argument("--bpb", help="prh eval-lm's JSON of the same models: the secondary predictor (reported only)")
    p.add_argument("--cross", required=True, help="prh align table of the relational language set against the vision set")
    p.add_argument("--zoo", required=True, type=json_object, help="JSON: the config's zoo.language runs")
    p.add_argument("--model-set", nargs="+", required=True, help="the relational language set's models")
    p.add_argument("--out", required=True)
    settings = add_slice(p, RELATIONAL_CONFIG)  # alpha, effect, seed
    a = p.parse_args(argv)
    cfg, runs = settings(a)["convergence.relational"], relational_runs(a.zoo, a.model_set)
    if not runs:
        raise UsageError("no zoo.language run has every checkpoint and a step-0 model of its family in --model-set; "
                         "set convergence.relational.model_set to a set of such runs (presets/language.yaml)")
    cross = read_json(a.cross, keys=("scores", "x_names", "y_names"))
    try:
        res = relational_test(relational=read_json(a.relational, keys=("models",)), cross=cross, runs=runs,
                              vision_models=list(cross["y_names"]), alpha=float(cfg["alpha"]),
                              sesoi=claim_decision()["sesoi"], effect=float(cfg["effect"]), seed=cfg["seed"],
                              bpb=read_json(a.bpb, keys=("models",)) if a.bpb else None)
    except (ValueError, KeyError) as err:
        raise UsageError(str(err)) from err
    write_json(a.out, res)
    w = res["weighed"]
    print(f"{a.out}: {res['n']} runs; pooled r {w['value']}, p {w['p']}; power {res['power']['power']:.2f}; "
          f"gate {res['gate']['n_passed']} passing; {res['verdict']}")
