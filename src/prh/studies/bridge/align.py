"""Stage 2 of the bridge, alignment part: each arm's features against the strongest vision model and the world.

Mutual k-NN (PRH appendix A; ``prh.metrics``), best layer pair, between every arm's
N x L x D features (``arm.run_arm``) and (a) the vision model with the highest mean probe
accuracy of the zoo (``prh.experiments.downstream.strongest_vision_model``; the paper
suite names one), its features restricted to the same first N items, and (b) the shapes
world's ground-truth kernel (``prh.experiments.convergence.platonic_scores``).

    prh run-bridge-align --arms results/experiments/bridge/arms/*/features.safetensors \\
        --probe-data results/data/shapes_vision --vision-probes results/experiments/zoo/vision.json \\
        --vision-features results/features/shapes_vision/*.safetensors --out results/experiments/bridge/alignment.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["run_alignment", "main"]


def run_alignment(*, features: list[str], probe_data: str, out: str, vision_probes: str | None = None,
                  vision_model: str | None = None, vision_features: list[str] | None = None, topk: int = 10,
                  quantile: float = 0.95) -> dict:
    """``{"vision_model", "arms": {arm: {"vision": score, "vision_pair", "world": score}}}`` written to ``out``.

    ``vision_features``: the feature files of the candidate vision models, each ``<model>.safetensors``; the
    arms are aligned with the strongest's (``vision_model``, or the best of ``vision_probes``)."""
    from prh.io import load_features, read_jsonl, write_json
    from prh.metrics import layer_pair_scores, prepare_features

    if not features:
        raise ValueError("features is empty; give every arm's features.safetensors")
    best = vision_model
    if best is None and vision_probes:
        from prh.evaluation.probes import read_probe_results
        from prh.studies.downstream.run import strongest_vision_model

        best = strongest_vision_model(read_probe_results(vision_probes))
    theirs = None
    if best and vision_features:
        paths = {Path(p).stem: p for p in vision_features}
        if best not in paths:
            raise ValueError(f"no features of the strongest vision model {best!r} among --vision-features {sorted(paths)}")
        theirs, meta = load_features(paths[best], with_meta=True)
    scenes_path = Path(probe_data) / "scenes.jsonl"
    scenes = [r["scene"] for r in read_jsonl(scenes_path, keys=("scene",))] if scenes_path.exists() else None
    res = {"vision_model": best, "topk": topk, "quantile": quantile, "arms": {}}
    for path in features:
        feats, own = load_features(path, with_meta=True)
        n = feats.shape[0]
        ours = prepare_features(feats, q=quantile)
        row = {}
        if theirs is not None:
            lv = layer_pair_scores("mutual_knn", ours, prepare_features(theirs[:n], q=quantile,
                                                                         layer_dims=meta.get("layer_dims")), topk=topk)
            row.update(vision=lv.best_score, vision_pair=list(lv.best_pair))
        if scenes is not None:
            from prh.studies.convergence.run import platonic_scores

            row["world"] = platonic_scores(feature_paths=[path], scenes=scenes[:n], topk=topk,
                                           quantile=quantile)[own["model"]]["score"]
        res["arms"][own["model"]] = row
    write_json(out, res)
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh run-bridge-align", description=__doc__.splitlines()[0])
    p.add_argument("--arms", nargs="+", required=True, help="features.safetensors of every arm")
    p.add_argument("--probe-data", required=True, help="the dataset the features come from (scenes: world kernel)")
    p.add_argument("--vision-probes", default=None, help="`prh probe` JSON: the strongest vision model")
    p.add_argument("--vision-model", default=None, help="or name the vision model (paper suite)")
    p.add_argument("--vision-features", nargs="+", default=None,
                   help="<model>.safetensors of the candidate vision models (the strongest one is read)")
    # the suite's bridge.<suite>.config (its rule passes them; no default here: the schema is the one home of defaults)
    p.add_argument("--topk", type=int, required=True, help="k of mutual k-NN")
    p.add_argument("--quantile", type=float, required=True, help="feature clamp quantile before alignment")
    p.add_argument("--out", required=True)
    args = vars(p.parse_args(argv))
    args["features"] = args.pop("arms")
    res = run_alignment(**args)
    for arm, row in res["arms"].items():
        print(arm, row)
