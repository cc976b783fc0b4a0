"""The transfer study's manifest (Imani, Hu & White: representation alignment and transfer)."""

from __future__ import annotations

from prh.claims import verdict
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

T = "Transfer"
RUN = "training run (means over runs compared)"
ORDER = "the stated ordering of the run means holds"
STUDY = Study(
    name="transfer", title="Representation alignment and transfer (Imani et al.)",
    source="Imani, Hu & White (004_fd8c818b5d62f1d7.txt)",
    outputs=("peaks_alignment.json", "peaks_transfer.json", "peaks_deep.json", "emergence_shuffled.json",
             "digits_layerwise.json", "layerwise.json", "metrics.json"),
    figures=(
        Figure("transfer_fig02_shuffled_emergence", "prh.plots.transfer:plot_shuffled_emergence",
               {"emergence": f"{E}/transfer/emergence_shuffled.json"}, "transfer/shuffled_emergence", T, "transfer"),
        Figure("transfer_fig07_layerwise", "prh.plots.transfer:plot_layerwise",
               {"layerwise": f"{E}/transfer/layerwise.json"}, "transfer/layerwise", T, "transfer"),
        Figure("transfer_fig10_peaks_alignment", "prh.plots.transfer:plot_peaks_alignment",
               {"peaks": f"{E}/transfer/peaks_alignment.json"}, "transfer/peaks_alignment", T, "transfer"),
        Figure("transfer_fig11_peaks_transfer", "prh.plots.transfer:plot_peaks_transfer",
               {"peaks": f"{E}/transfer/peaks_transfer.json"}, "transfer/peaks_transfer", T, "transfer"),
        Figure("transfer_fig12_peaks_layers", "prh.plots.transfer:plot_peaks_layers",
               {"peaks": f"{E}/transfer/peaks_deep.json"}, "transfer/peaks_layers", T, "transfer"),
    ),
    commands=("run-transfer",),
    claims=tuple(ClaimSpec(key, f"Imani et al., {'Proposition 1' if key.startswith('prop') else 'Fig ' + key.split('_')[0][3:]}",
                           statement, stat, RUN, ORDER)
                 for key, statement, stat in (
        ("fig10_source_alignment_rises", "training raises the source task's alignment above input and init",
         "alignment AUC (trained vs input, init)"),
        ("fig10_related_alignment_rises", "training raises a related task's alignment", "alignment AUC"),
        ("fig10_unrelated_alignment_below_input", "an unrelated task's alignment falls below the input's",
         "alignment AUC"),
        ("fig11_related_faster", "a related task trains faster on the trained representation",
         "mean relative training MSE"),
        ("fig11_related_smaller_weights", "a related task needs smaller weights", "weight norm at half the loss removed"),
        ("fig11_related_better_test", "a related task reaches a lower test MSE", "best test MSE"),
        ("fig11_unrelated_slower_than_input", "an unrelated task trains slower than on the input",
         "mean relative training MSE"),
        ("fig11_unrelated_worse_test", "an unrelated task reaches a higher test MSE", "best test MSE"),
        ("fig12_source_alignment_rises_with_depth", "the source task's alignment rises with depth", "AUC by layer"),
        ("fig12_related_alignment_not_rising_with_depth", "a related task's alignment does not rise with depth",
         "AUC by layer"),
        ("fig2_input_aligned_with_true_not_shuffled", "the input aligns with true labels, not shuffled ones", "AUC"),
        ("fig2_alignment_emerges_on_shuffled_labels", "training on shuffled labels creates alignment with them", "AUC"),
        ("fig7_later_layers_better_after_training", "after training later layers align better", "AUC by layer"),
        ("fig7_order_reversed_at_init", "at initialisation earlier layers align better", "AUC by layer"),
        ("fig7_peaks_later_layers_better_after_training", "the same on the peaks network", "AUC by layer"),
        ("fig7_peaks_order_reversed_at_init", "the same at initialisation on the peaks network", "AUC by layer"),
        ("prop1_closed_form_matches_gd", "Proposition 1's closed form equals gradient descent's solution",
         "largest relative error (rule: < 1e-8)"),
    )),
    verdict_inputs={"metrics": "metrics.json", "peaks": "peaks_alignment.json"},
)


def results(suite: str, alpha: float, *, metrics: dict, peaks: dict) -> dict:
    runs = (peaks.get("config") or {}).get("runs")
    return {key: {"value": None, "n": runs, "seeds": runs, "verdict": c.get("verdict", verdict(c["reproduced"]))}
            for key, c in metrics["claims"].items()}
