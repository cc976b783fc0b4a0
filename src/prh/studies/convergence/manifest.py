"""The convergence study's manifest (PRH section 2, Figs 2 and 3; the platonic reference).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import correlation_row as correlation
from prh.claims import run_level_fields, verdict
from prh.errors import UsageError

__all__ = ["results"]


def _run_level(rl: dict | None) -> str | None:
    """The registered test's run-level p (checkpoints as clusters of their run), for the note."""
    if not rl:
        return None
    if rl.get("p_permutation") is None:
        return f"run-level p not computed: {rl.get('reason')}"
    return f"run-level p = {rl['p_permutation']:.3g} ({rl['clusters']} runs as clusters, {rl['permutations']} permutations)"


def _relational(test: dict) -> dict:
    """The relational row: the verdict the registered test gave (``prh relational-test``), its strata as the entries the
    ledger weighs (sizes of independent runs; none when no run passed the gate: not testable, as registered)."""
    w, gate, power = test["weighed"], test["gate"], test["power"]
    strata = [{"value": s["spearman_r"] if gate["passed"] else None, "n": s["n"]} for s in test["strata"].values()]
    per_size = ", ".join(f"{f} r = {s['spearman_r']:.3g} (n = {s['n']})" if s["spearman_r"] is not None
                         else f"{f} r undefined" for f, s in test["strata"].items())
    note = "; ".join(filter(None, [
        per_size, f"power {power['power']:.2f} at rho = {power['effect']:g}",
        f"gate: {gate['n_passed']} of {gate['n_runs']} final checkpoints follow the left-most swap"
        + ("" if gate["passed"] else ": not testable, the predictor does not read the relation"),
        f"competence: {test['competence']['runs_above_chance']} of {test['n']} runs above chance"]))
    return {"value": w["value"], "p": w["p"], "n": test["n"], "interval": w["interval"], "seeds": test["n"],
            "verdict": test["verdict"], "strata": strata, "note": note}


def row(key: str, record: dict) -> dict:
    """What ``results`` says of claim ``key`` from its record alone, for a ledger whose runs do not make it
    (``prh.studies.ledger.with_record``): the relational test, whose runs are presets/language.yaml's."""
    if key != "relational":
        raise UsageError(f"convergence.{key} is not built from a record of its own; only convergence.relational is")
    return _relational(record)


def results(suite: str, alpha: float, *, metrics: dict, platonic: dict | None, world_gate: dict | None = None,
            relational: dict | None = None) -> dict:
    seeds = 1 if suite == "offline" else None  # offline: one draw of the zoo; paper: fixed public checkpoints
    out = {"fig02_competence": correlation(metrics["competence_alignment"], alpha, seeds),
           "fig03_descriptive": correlation(metrics["language_vision_descriptive"], alpha, seeds)}
    pre = metrics.get("language_vision_preregistered")  # offline only: the zoo's LMs are its units
    if pre is not None:
        out["fig03_preregistered"] = {"value": pre.get("spearman_r"), "p": pre.get("p_holm"), "n": pre.get("n"),
                                      "seeds": seeds, "verdict": pre["verdict"], "gate": pre.get("gate_passed"),
                                      "note": "; ".join(filter(None, [
                                          None if pre.get("gate_passed") else "validity gate not passed",
                                          _run_level(pre.get("run_level"))])) or None}
    amended = metrics.get("language_vision_amended")
    if amended is not None:
        # its unit is the run: every run is an independent draw (not the count of seed labels)
        out["fig03_amended"] = {"value": amended.get("spearman_r"), "p": amended.get("p_holm"), "n": amended.get("n"),
                                "seeds": amended.get("n") if suite == "offline" else None,
                                "verdict": amended["verdict"], "note": amended.get("reason")}
    if world_gate is not None:  # offline only: the zoo's runs
        gate = world_gate
        if "n_judged" not in gate:
            raise UsageError("world_gate.json predates the gate's `judge` rule: rerun it with "
                             "`snakemake --forcerun world_gate`")
        judged = [m for m in gate["models"].values() if m["passed"] is not None]
        runs_seeds = len(judged) or None  # the independent runs it judged (runs, not seed labels)
        written = gate.get("fraction_passed_as_written")
        untestable = gate.get("untestable") or []
        out["fig03_world_gate"] = {
            "value": gate["fraction_passed"], "n": gate["n_judged"], "seeds": runs_seeds,
            "verdict": verdict(gate["passed"], testable=bool(gate["kept"]) and gate["passed"] is not None),
            "note": "; ".join(filter(None, [
                gate.get("reason") or f"kept {', '.join(gate['kept'])}; pass fraction {gate['settings']['pass_fraction']}",
                f"{gate['n_judged']} of {gate['n_models']} runs judged" + (
                    f"; not testable for some run (baseline wrong on < {gate['settings']['min_discordant']} test items): "
                    f"{', '.join(untestable)}" if untestable else ""),
                None if written is None else f"as first written (every kept attribute, testable or not): "
                                             f"{written:.3g} passed, {verdict(gate.get('passed_as_written'))}"]))}
    if relational is not None:  # presets/language.yaml only
        out["relational"] = _relational(relational)
    for modality in ("vision", "language"):
        if modality in ((platonic or {}).get("platonic") or {}):
            out[f"platonic_{modality}"] = correlation(platonic["platonic"][modality], alpha, seeds)
            if modality == "language" and suite != "offline":
                out["platonic_language"]["runs"] = None  # public checkpoints: independent models
            elif modality == "language":
                out["platonic_language"].update(run_level_fields(platonic["platonic"][modality].get("run_level")))
    return out
