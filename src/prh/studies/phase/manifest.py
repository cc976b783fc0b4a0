"""Seed 000's manifest: phase incompatibility (NTK cross-similarity and AGOP) on the zoo."""

from __future__ import annotations

from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

P, PAIR, MODEL = "Seed 000: phase", "model pair (models as clusters: modality-label or Mantel permutations)", "model"
PERM = "statistic > 0 and permutation p < alpha (params.yaml phase.alpha)"
STUDY = Study(
    name="phase", title="Seed 000: phase incompatibility", source="seed 000 (000_51e3575aec6f4321.txt)",
    outputs=("pairs.csv", "table1.csv", "metrics.json"),
    figures=(
        Figure("phase_fig01a_landscape", "prh.plots.phase:plot_fig1a",
               {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase/fig1a", P, "phase"),
        Figure("phase_fig01b_families", "prh.plots.phase:plot_fig1b",
               {"table1": f"{E}/phase/table1.csv", "metrics": f"{E}/phase/metrics.json"}, "phase/fig1b", P, "phase"),
        Figure("phase_fig02_histograms", "prh.plots.phase:plot_fig2",
               {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase/fig2", P, "phase"),
    ),
    commands=("run-phase-model", "run-phase-adaptive-lr", "run-phase-analysis"),
    claims=(
        ClaimSpec("C1", "seed 000, abstract and sec. 1", "cross-modal alignment is far below within-modality alignment",
                  "within minus cross mean retrieval", PAIR, f"{PERM}; median cross < cross_max, within > within_min"),
        ClaimSpec("C2a", "seed 000, Figs 1a and 2", "most cross-modal pairs have NTK similarity S < low_s",
                  "fraction of cross pairs with S (eq. 3) < low_s", PAIR, "fraction >= low_s_fraction (descriptive)"),
        ClaimSpec("C2b", "seed 000, sec. 2", "cross-modal S is lower than within-modality S",
                  "within minus cross mean S", PAIR, PERM),
        ClaimSpec("C2c", "seed 000, Fig 1b", "every vision family's mean cross-modal S is below the chaotic line",
                  "largest vision-family mean cross S", "vision family", "statistic < chaotic (descriptive)"),
        ClaimSpec("C3", "seed 000, Fig 1a (RQ2)", "S explains cross-modal alignment",
                  "partial Spearman r(S, retrieval | log params, feature CKA)", PAIR, PERM + " (Mantel)"),
        ClaimSpec("T1_spectral_decay", "seed 000, Table 1", "vision models' spectra decay faster than language models'",
                  "vision minus language mean spectral decay", MODEL, PERM),
        ClaimSpec("T1_compression", "seed 000, Table 1", "vision models compress more than language models",
                  "vision minus language mean compression", MODEL, PERM),
        ClaimSpec("T1_agop", "seed 000, Table 1", "language models have a larger AGOP top eigenvalue",
                  "vision minus language mean log10 AGOP lambda_1 (expected < 0)", MODEL, PERM + " (sign flipped)"),
        ClaimSpec("T1_chaotic", "seed 000, Table 1", "every family is chaotic", "largest family mean cross S",
                  "model family", "statistic < chaotic (descriptive)"),
        ClaimSpec("C4a", "seed 000, sec. 3", "an AGOP ratio above the threshold predicts failure",
                  "balanced accuracy of the rule", PAIR, "balanced accuracy >= min and Mantel p < alpha"),
        ClaimSpec("C4b", "seed 000, sec. 3", "delta NTK x log10 AGOP above the threshold predicts failure",
                  "balanced accuracy of the rule", PAIR, "balanced accuracy >= min and Mantel p < alpha"),
        ClaimSpec("T2_adaptive_lr", "seed 000, Table 2", "an adaptive learning rate eta_0 S(t) beats a fixed one",
                  "mean adaptive minus fixed retrieval", "model pair", "mean > 0 and sign-flip p < alpha"),
        ClaimSpec("T2_phase_regularisation", "seed 000, Table 2", "phase regularisation improves alignment",
                  "none", "model pair", "not specified by the seed"),
        ClaimSpec("T2_compatible_init", "seed 000, Table 2", "a phase-compatible initialisation improves alignment",
                  "none", "model pair", "not specified by the seed"),
        ClaimSpec("F3_information_ratio", "seed 000, Fig 3", "the information ratio separates the phases",
                  "none", "model", "not specified by the seed"),
    ),
    verdict_inputs={"metrics": "metrics.json"},
)

# the keys of metrics.json's "claims" (analysis names) -> the ledger's; C2a has a literal and a centred S
_KEYS = {"C1": "C1_alignment_gap", "C2b": "C2b_cross_below_within", "C3": "C3_s_explains_alignment",
         "T1_spectral_decay": "T1_spectral_decay_vision_gt_language", "T1_compression": "T1_compression_vision_gt_language",
         "T1_agop": "T1_agop_language_gt_vision", "T1_chaotic": "T1_every_family_chaotic",
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
        out[key] = {"value": c.get("statistic"), "p": c.get("p_value"), "n": c.get("n_pairs", n),
                    "seeds": seeds, "verdict": c["verdict"], "note": c.get("reason")}
    return out
