"""What the density rules read while Snakemake parses them; torch- and scipy-free.

Every Snakemake start (a no-op rerun, a dry run) imports what the rules name, so these live
apart from the modules that run the study: appendix E's summarisation prompt, whose hash is a parameter of the
density rules (``density.smk``) so that editing the prompt reruns the summaries, and the params.yaml keys
``prh run-density`` and ``prh summarise-captions`` read (their rules' ``--config``: ``prh.slices``).
"""

from __future__ import annotations

import hashlib

__all__ = ["CONFIG", "SUMMARISE_CONFIG", "SYSTEM_PROMPT", "USER_PROMPT", "FALLBACK_FORMAT", "prompt_sha256"]

# the params.yaml keys run-density reads, by block (prh.slices)
CONFIG = {"alignment": ("metric", "topk", "quantile", "cca_dim")}
# and those summarise-captions reads: the summaries' lengths and how they are generated
SUMMARISE_CONFIG = {"density": ("num_words", "batch_size", "max_new_tokens", "max_items", "seed")}

# PRH appendix E, verbatim (following Urbanek et al. 2023); <num_words> is filled in.
SYSTEM_PROMPT = (
    "You are given a full-text description of an image. You should summarize it into about <num_words> words, "
    "being sure to include as much salient visual information as possible given the <num_words> word constraint, "
    "especially information from the start of the original description. The new description should apply for the "
    "original image. Respond with only the summary, in one line."
)
USER_PROMPT = "<original_caption>"  # appendix E: the user turn is the dense caption itself
FALLBACK_FORMAT = "{system}\n\n{user}\n"  # prompt text for tokenizers without a chat template


def prompt_sha256() -> str:
    """SHA-256 of the prompt templates (system, user, fallback format): recorded in meta.json."""
    return hashlib.sha256("\x00".join([SYSTEM_PROMPT, USER_PROMPT, FALLBACK_FORMAT]).encode()).hexdigest()
