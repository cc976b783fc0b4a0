"""Datasets of the workflow.

* ``shapes``: the shapes world (PRH section 4.1): scene sampler, renderer, dataset dirs, ground-truth kernel.
* ``world_prob``: the generator's exact probabilities: of a scene, of a densest caption, the entropy floor.
* ``captions``: the caption grammar at six nested densities, and its parser.
* ``tasks``: the downstream task suite over the world's scenes (the offline analogue of VTAB).
* ``hub``: the paper suite's Hugging Face datasets, materialised as paired dataset dirs.
"""
