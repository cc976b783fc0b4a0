"""The arms of params.yaml's ``bridge`` block: defaults, named arms and sweeps; torch-free.

Snakemake expands the arms while it parses the rules (one ``bridge_arm`` job each), so this
module stays apart from ``arm`` (which trains them) and imports no torch.
"""

from __future__ import annotations

import itertools

from prh.config import SCHEMA, load_schema
from prh.errors import ConfigError
from prh.slices import block_keys

__all__ = ["ANALYSIS_CONFIG", "ARM_DEFAULTS", "OUTLIERS_CONFIG", "arm_spec", "expand_arms", "select_arms"]

# the params.yaml keys run-bridge-outliers and run-bridge-analysis read: each its whole block (prh.slices)
OUTLIERS_CONFIG = {"bridge.outliers": block_keys("bridge.outliers")}
ANALYSIS_CONFIG = {"bridge.analysis": block_keys("bridge.analysis")}

# an arm's keys and defaults, from workflow/schemas/bridge.schema.yaml (the one home of every default)
ARM_DEFAULTS = {k: v["default"] for k, v in
                load_schema(SCHEMA.parent / "bridge.schema.yaml")["$defs"]["setting"]["properties"]["arms"]
                ["additionalProperties"]["properties"].items()}


def arm_spec(arm: dict, *, epochs: int) -> dict:
    """The arm with defaults filled in (``epochs`` None -> the config's); ValueError names a bad key."""
    unknown = sorted(set(arm) - set(ARM_DEFAULTS))
    if unknown:
        raise ConfigError(f"arm: unknown key(s) {unknown}; allowed: {sorted(ARM_DEFAULTS)}")
    spec = {**ARM_DEFAULTS, **arm}
    spec["epochs"] = epochs if spec["epochs"] is None else int(spec["epochs"])
    spec["ratio"] = float(spec["ratio"])
    return spec


def expand_arms(arms: dict | None = None, sweeps: list | None = None) -> dict:
    """Named arms plus the cross products of ``sweeps`` (lists per key), named ``{init}_r{ratio}_k{blocks}_s{seed}``."""
    out = dict(arms or {})
    for sweep in sweeps or []:
        keys = sorted(sweep)
        bad = sorted(set(keys) - set(ARM_DEFAULTS))
        if bad:
            raise ConfigError(f"sweep: unknown key(s) {bad}; allowed: {sorted(ARM_DEFAULTS)}")
        for values in itertools.product(*(sweep[k] if isinstance(sweep[k], list) else [sweep[k]] for k in keys)):
            arm = {**ARM_DEFAULTS, **dict(zip(keys, values))}
            name = f"{arm['init']}_r{float(arm['ratio']):g}_k{arm['blocks']}_s{arm['seed']}"
            name += "" if arm["epochs"] is None else f"_e{arm['epochs']}"
            out[name] = {k: arm[k] for k in keys}
    return out


def select_arms(arms: dict, run_arms: list | None, *, where: str = "run_arms") -> dict:
    """The arms ``run_arms`` names, in its order (None: every arm); ValueError names any it does not define."""
    if run_arms is None:
        return arms
    unknown = sorted(set(run_arms) - set(arms))
    if unknown:
        raise ConfigError(f"{where}: unknown arms {unknown}; defined: {sorted(arms)}")
    return {name: arms[name] for name in run_arms}
