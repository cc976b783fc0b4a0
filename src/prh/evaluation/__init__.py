"""Did a model learn? Competence measured before its alignment is read.

- ``likelihood``: next-token cross-entropy, bits per byte (PRH Fig 3's x-axis), multiple choice
- ``probes``, ``probe_splits``: linear probes on the shapes-world tasks and on datasets with their own splits
- ``lm_eval``, ``lm_score``, ``harness``: held-out bits per byte of the zoo's and the hub's LMs; lm-evaluation-harness
- ``world_gate``: the language test's world-derived gate against bag-of-words baselines
- ``zoo_summary``: trained-vs-untrained margins of the offline zoo
"""
