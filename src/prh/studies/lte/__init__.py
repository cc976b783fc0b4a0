"""LoRA-the-Explorer (LTE): training from scratch with parallel low-rank heads.

Source: Huh, *Parsimonious Principles of Deep Neural Networks* (PhD thesis, MIT 2024; docs/sources.md), chapter 4
(sections 4.2.1-4.3.5) and appendix 8.1-8.5, 8.8:

- ``lora``: the LoRA-parameterised linear layer W x + s B A x, s = alpha / r (eq. 4.1),
  its multi-head form W x + (s / N) sum_n B_n A_n x (eq. 4.2), semi-orthogonal init.
- ``engine``: the distributed trainer (torch.distributed: gloo on CPU, nccl on GPU).
  Heads are assigned round-robin to ranks; every T local steps the LoRA factors are
  all-gathered and merged, W <- W + (s / N) sum_n B_n A_n (section 4.2.3), the small
  (non-LoRA) parameters are all-reduced and averaged; DDP for the standard baseline.
- ``least_squares``: Fig 8.1 (appendix 8.3).
- ``vision``: a small ViT on the shapes world, Figs 4.5/4.6, Fig 8.5, Table 4.9 (mini).
- ``orthogonality``: Fig 4.7 (|cos| and Grassmann distance between heads, appendix 8.5).
- ``verdicts``: the claims and their verdicts (metrics.json).

Run it under torchrun (one thread per rank)::

    torchrun --standalone --nproc_per_node 2 -m prh.cli run-lte --experiment least_squares \\
        --config '{...}' --out results/experiments/lte/least_squares.json
"""
