"""The torchrun launch of a distributed job (LoRA-the-Explorer's rules), on one machine or across SLURM tasks.

``torchrun_launcher(nnodes=1, nproc=P)`` is ``torchrun --standalone --nproc_per_node P``. Otherwise one
torchrun agent runs per SLURM task (``srun --ntasks-per-node T``), ``nnodes x T`` agents in all, each
starting ``nproc`` ranks, and they meet at a c10d rendezvous on the first node of the allocation
(``scontrol show hostnames $SLURM_JOB_NODELIST``): the shell expands ``$SLURM_JOB_ID`` and the node
name inside the job. Two agents on one node need nothing more: the one that cannot bind the port
joins as a client (``tasks_per_node=2`` is how tests/slurm runs it as one SLURM job of 2 tasks).
"""

from __future__ import annotations

__all__ = ["RDZV_PORT", "torchrun_launcher"]

RDZV_PORT = 29500  # torchrun's default; open between the nodes


def torchrun_launcher(nnodes: int, nproc: int, *, tasks_per_node: int = 1, port: int = RDZV_PORT) -> str:
    """The command before ``-m prh.cli ...``: torchrun alone on one node, under srun across SLURM tasks."""
    if nnodes < 1 or nproc < 1 or tasks_per_node < 1:
        raise ValueError(f"nnodes, nproc and tasks_per_node must be >= 1, got {nnodes}, {nproc}, {tasks_per_node}")
    if nnodes == 1 and tasks_per_node == 1:
        return f"torchrun --standalone --nproc_per_node {nproc}"
    return (f"srun --ntasks-per-node {tasks_per_node} torchrun --nnodes {nnodes * tasks_per_node} "
            f"--nproc_per_node {nproc} --rdzv_backend c10d --rdzv_id $SLURM_JOB_ID "
            f'--rdzv_endpoint "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):{port}"')
