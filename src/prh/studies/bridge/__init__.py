"""Seed 001: random-label "bridge" training of a language-pretrained transformer on images.

Source: Luo & Shen, "Language-Pretraining-Induced Bias: A Strong Foundation for General
Vision Tasks" (arXiv 2604.01833, read through a machine review page; docs/sources.md).
Claims tested (figure numbers of the paper):

- Fig 2: language-pretrained transformers carry heavy-tailed "outlier" weights; vision ones fewer
  (``outliers``);
- Figs 3/12: on images, a language-pretrained transformer trains better than one from scratch,
  even with 100 % random labels; Fig 6: stage 1 on random labels (the bridge), stage 2 a light
  classifier on real labels (``model``, ``train``, ``arm``);
- Figs 8/13: bridging the first 2 blocks matches bridging all, the first 5 beat it (``arm``);
- Figs 10/11/14: after random labels the pretrained model has more outliers than scratch, and
  correct labels reduce them (``outliers``);
- Appendix A (after Maennel et al. 2020): under random labels the first layer's weight covariance
  aligns its eigenvectors with the input covariance (``covariance``).

Verdicts, with the pre-registered statistics of params.yaml's ``bridge`` block, come from
``analysis``; ``prh run-bridge-arm`` / ``bridge-align`` / ``bridge-outliers`` / ``bridge-analyse`` run them.
"""
