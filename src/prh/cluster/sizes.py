"""Host memory and time limit of the workflow's fixed-size jobs, in one table.

``JOB_SIZES[name]`` is a rule's ``resources:`` (``mem_mb``: MB of host memory, ``runtime``: minutes), keyed by the
rule's name, or for the rules a loop defines (``train_language_<run>``, ``transfer_<part>``, ``prepare_<dataset>``,
``plot_<figure>``) by their family, the folder of their logs. A rule reads its entry as ``resources:
**JOB_SIZES["name"]``. Jobs whose size follows the model or the data (extraction, LM scores, alignment, the GPU
studies) compute theirs in their rule file, and a rule that names no resources gets the workflow profile's
``default-resources`` (profiles/default/config.yaml). The SLURM profile turns them into ``--mem`` and ``-t``.
"""

from __future__ import annotations

__all__ = ["JOB_SIZES"]


JOB_SIZES = {
    # data (data.smk, prepare.smk, paper_data.smk)
    "shapes_dataset": dict(mem_mb=1000, runtime=15),
    "prepare": dict(mem_mb=4000, runtime=120),
    # images are decoded into a memory-mapped file (prh.data.hub_datasets): memory does not grow with N x S^2
    "hub_dataset": dict(mem_mb=8000, runtime=120),
    "lm_sample": dict(mem_mb=8000, runtime=120),
    # the offline zoo (zoo_vision.smk, zoo_language.smk)
    "train_vision": dict(mem_mb=2000, runtime=15),
    "probe_vision": dict(mem_mb=2000, runtime=20),
    "train_tokenizer": dict(mem_mb=2000, runtime=10),
    "train_language": dict(mem_mb=2000, runtime=30),
    "minilm": dict(mem_mb=500, runtime=5),
    "lm_eval": dict(mem_mb=2000, runtime=30),
    "probe_language": dict(mem_mb=2000, runtime=30),
    "score_relational": dict(mem_mb=2000, runtime=60),
    # convergence.smk
    "probe_vtab_task": dict(mem_mb=8000, runtime=60),
    "probe_vtab": dict(mem_mb=1000, runtime=5),
    "lm_score_merge": dict(mem_mb=1000, runtime=5),
    "convergence": dict(mem_mb=2000, runtime=10),
    "world_gate": dict(mem_mb=2000, runtime=20),
    "convergence_platonic": dict(mem_mb=4000, runtime=10),
    "relational_test": dict(mem_mb=2000, runtime=10),
    # downstream.smk
    "downstream_mc": dict(mem_mb=4000, runtime=30),
    "downstream_harness_merge": dict(mem_mb=1000, runtime=5),
    "downstream": dict(mem_mb=1000, runtime=5),
    # metric_agreement.smk, sample_size.smk
    "locality": dict(mem_mb=8000, runtime=120),
    "metric_agreement": dict(mem_mb=8000, runtime=60),
    "sample_size": dict(mem_mb=8000, runtime=120),
    # the CPU studies (phase.smk, bridge.smk, color.smk, simplicity.smk, transfer.smk, lte.smk)
    "phase_analyse": dict(mem_mb=3000, runtime=20),
    "bridge_outliers": dict(mem_mb=3000, runtime=10),
    "bridge_align": dict(mem_mb=2000, runtime=10),
    "bridge_analyse": dict(mem_mb=1000, runtime=5),
    "color_vision": dict(mem_mb=4000, runtime=30),
    "color_nce": dict(mem_mb=2000, runtime=15),
    "color_metrics": dict(mem_mb=500, runtime=5),
    "simplicity_experiment": dict(mem_mb=2000, runtime=15),
    "simplicity_metrics": dict(mem_mb=1000, runtime=5),
    "transfer": dict(mem_mb=3000, runtime=30),
    "transfer_claims": dict(mem_mb=1000, runtime=5),
    "lte_verdicts": dict(mem_mb=500, runtime=5),
    # figures.smk
    "plot": dict(mem_mb=1000, runtime=5),
    "zoo_metrics": dict(mem_mb=500, runtime=5),
}
