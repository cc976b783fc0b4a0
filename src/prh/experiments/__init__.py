"""Experiments: one module per family (probes, competence, colour, density, transfer, ...)."""
