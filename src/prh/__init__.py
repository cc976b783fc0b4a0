"""prh: a reproducibility workflow for the Platonic Representation Hypothesis.

Huh, Cheung, Wang, Isola (ICML 2024). The library is importable and testable on
its own; the Snakemake rules in ``workflow/rules`` call it through ``prh <command>``.
"""

__version__ = "0.1.0"
