"""The claims ledger as the report's table (``results/figures/claims_ledger.csv``)."""

from __future__ import annotations

import csv
from pathlib import Path

from prh.io import atomic_path

__all__ = ["COLUMNS", "write_ledger"]

COLUMNS = ["id", "source", "statement", "verdict", "verdict_registered", "provisional", "statistic", "value", "interval",
           "p", "n", "sesoi", "mde", "unit", "seeds", "rule", "post_hoc", "validity_gate", "note"]  # the weighed verdicts' fields


def write_ledger(ledger: dict, out) -> list[Path]:
    """One row per claim, in the ledger's order; the interval as "lo..hi"."""
    out = Path(out).with_suffix(".csv")
    with atomic_path(out) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in ledger["claims"]:
            interval = row["interval"]
            w.writerow({**{k: row.get(k) for k in COLUMNS},
                        "interval": "" if interval is None else f"{interval[0]}..{interval[1]}"})
    return [out]
