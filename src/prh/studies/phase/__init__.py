"""Seed 000, "Phase Incompatibility Explains Cross-Modal Alignment Failure" (a manuscript; docs/sources.md).

Its claims are tested as hypotheses on the offline zoo:

- ``ntk``: empirical NTK from per-sample gradients (eq. 2), count sketch, NTK similarity
  S (eq. 3, literal and centred), AGOP spectrum (eq. 4) without forming the P × P matrix;
- ``models``: a zoo or hub model as a pooled-feature function of (parameters, one item);
- ``dynamics``: one model's NTK and AGOP, and its stability under a few training steps;
- ``run``: ``prh run-phase-model``, one job per model;
- ``alignment``: ridge-map retrieval (eq. 1) and the engine's mutual k-NN;
- ``spectra``: Table 1's compression (participation ratio) and spectral decay;
- ``stats`` / ``claims``: model-label permutation nulls, partial correlations, threshold
  rules, and a verdict per claim (sections 1-3, Figs 1-2, Tables 1-2);
- ``adaptive_lr``: Table 2's adaptive learning rate η₀ · S(t), the one buildable row;
- ``analysis``: ``prh run-phase-analysis``, pairs, Table 1 and metrics.json.
"""
