"""The simplicity-bias study's manifest (Huh's thesis, chapter 2: effective rank against depth)."""

from __future__ import annotations

from prh.claims import verdict
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

S, SB = "simplicity", "Simplicity bias"
FALLS = "every setting: Spearman rho < 0 with p < alpha"
STUDY = Study(
    name=S, title="Simplicity bias: effective rank falls with depth (thesis ch. 2)",
    source="Huh, thesis (003_bf5b686d19a1075e.txt), chapter 2",
    outputs=("random_nets.json", "products.json", "trained.json", "metrics.json"),
    figures=(
        Figure("simplicity_fig2.2_random_net_rank", "prh.plots.simplicity:plot_random_net_rank",
               {"random_nets": f"{E}/{S}/random_nets.json"}, f"{S}/random_nets", SB, S),
        Figure("simplicity_fig2.5_optimizer_rank", "prh.plots.simplicity:plot_optimizer_rank",
               {"trained": f"{E}/{S}/trained.json"}, f"{S}/optimizers", SB, S),
        Figure("simplicity_fig2.6_trained_linear_rank", "prh.plots.simplicity:plot_trained_linear_rank",
               {"trained": f"{E}/{S}/trained.json"}, f"{S}/trained", SB, S),
        Figure("simplicity_fig7.1_gaussian_product_rank", "prh.plots.simplicity:plot_gaussian_product_rank",
               {"products": f"{E}/{S}/products.json"}, f"{S}/products", SB, S),
    ),
    commands=("run-simplicity",),
    claims=(
        ClaimSpec("fig2.2_random_nets", "thesis Fig 2.2", "deeper random networks have a lower kernel rank",
                  "largest Spearman rho of effective rank vs depth over (activation, init)", "depth", FALLS),
        ClaimSpec("fig7.1_products", "thesis Theorem 2.4.1, Fig 7.1",
                  "products of more Gaussian matrices have a lower effective rank",
                  "largest Spearman rho of effective rank vs number of factors over n", "depth", FALLS),
        ClaimSpec("fig2.6_trained", "thesis Figs 2.5-2.6", "deeper linear networks trained on least squares find "
                  "lower-rank maps", "largest Spearman rho of the map's effective rank vs depth over optimizers",
                  "depth", FALLS),
    ),
    verdict_inputs={"metrics": "metrics.json"},
)


def _falls(trends: list[dict], alpha: float) -> dict:
    rhos = [t.get("spearman_rho") for t in trends]
    if not trends or any(r is None for r in rhos):
        return {"verdict": verdict(None), "note": "an undefined rho"}
    ok = all(t["spearman_rho"] < 0 and t["p_value"] < alpha for t in trends)
    return {"value": max(rhos), "p": max(t["p_value"] for t in trends), "n": min(t["n"] for t in trends),
            "seeds": None, "verdict": verdict(ok), "note": f"{len(trends)} settings"}


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    pick = lambda prefix, suffix="": [v for k, v in metrics.items()  # noqa: E731
                                      if k.startswith(prefix) and k.endswith(suffix) and isinstance(v, dict)]
    return {"fig2.2_random_nets": _falls(pick("random_net/"), alpha),
            "fig7.1_products": _falls(pick("products/"), alpha),
            "fig2.6_trained": _falls(pick("trained/", "/map_rank"), alpha)}
