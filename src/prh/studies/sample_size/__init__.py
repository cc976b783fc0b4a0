"""Alignment against the number of items N: raw and calibrated alignment, and the permutation
null, over nested subsets of one dataset (``run``; the sweep itself is ``prh.metrics.sample_size``)."""
