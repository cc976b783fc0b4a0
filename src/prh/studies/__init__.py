"""One package per study, named as its rule file, schema, params.yaml key, results folder and figures are.

PRH paper: ``convergence``, ``downstream``, ``color``, ``density``, ``metric_agreement``.
Seed 000: ``phase``. Seed 001: ``bridge``. Imani et al.: ``transfer``. Huh's thesis:
``simplicity`` (ch. 2) and ``lte`` (ch. 4). Each package's ``manifest`` declares its outputs,
figures, commands and claims (``prh.manifest``).
"""
