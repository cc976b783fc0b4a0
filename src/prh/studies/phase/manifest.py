"""Seed 000's manifest: phase incompatibility (NTK cross-similarity and AGOP) on the zoo.

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations


__all__ = ["results"]


# the keys of metrics.json's "claims" (analysis names) -> the ledger's; C2a has a literal and a centred S
_KEYS = {"C1": "C1_alignment_gap", "C2b": "C2b_cross_below_within", "C3": "C3_s_explains_alignment",
         "T1_spectral_decay": "T1_spectral_decay_vision_gt_language", "T1_compression": "T1_compression_vision_gt_language",
         "T1_agop": "T1_agop_language_gt_vision",  # T1_chaotic is C2c's number: one claim
         "C4a": "C4a_agop_ratio_rule", "C4b": "C4b_combined_rule", "T2_adaptive_lr": "T2_adaptive_lr",
         "T2_phase_regularisation": "T2_phase_regularisation", "T2_compatible_init": "T2_compatible_init",
         "F3_information_ratio": "F3_information_ratio"}


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    claims = metrics["claims"]
    seeds = 1 if suite == "offline" else None
    by_prefix = {k.split("_")[0]: k for k in claims if k.startswith(("C2a_", "C2c_")) and not k.endswith("_s_centred")}
    keys = {**_KEYS, "C2a": by_prefix.get("C2a"), "C2c": by_prefix.get("C2c")}
    out = {}
    for key, name in keys.items():
        c = claims.get(name) or {"verdict": "not testable", "reason": "not computed"}
        n = metrics["n_cross_pairs"] if key.startswith("C") else metrics["n_models"]
        note = c.get("reason")
        if key == "C1" and "median_cross" in c:  # the medians that decide it beside the permutation test
            note = "; ".join(filter(None, [note, f"median retrieval cross {c['median_cross']:.3g} (rule: < cross_max), "
                                                 f"within vision {c['median_within_vision']:.3g} and language "
                                                 f"{c['median_within_language']:.3g} (rule: > within_min)"]))
        value, p = c.get("statistic"), c.get("p_value")
        if key.startswith("C4") and not 0 < c.get("predicted_failure_rate", 0.5) < 1:  # no measurement
            value, p = None, None  # 0.5 by construction (every null draw too), which a run-level test must not pool
            note = "; ".join(filter(None, [note, "the rule predicts one class for every pair: no balanced accuracy"]))
        out[key] = {"value": value, "p": p, "n": c.get("n_pairs", n), "seeds": seeds, "verdict": c["verdict"],
                    "note": note}
    return out
