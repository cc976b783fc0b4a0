"""The rates and sizes the plan cost assumes (H100 peaks, startup, tokens per caption), and the item and token
counts every cost formula reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

BYTES_PER_PARAM = 2            # bf16 weights
ACTIVATION_OVERHEAD = 0.2      # activations, KV cache and CUDA context on top of the weights
PEAK_FLOPS = 989e12            # H100 SXM, bf16 dense
FP32_PEAK_FLOPS = 67e12        # H100 SXM, fp32 on CUDA cores: training and Jacobians, and vision with
                               # features.vision_dtype float32 (as the reference; PyTorch leaves TF32 off by default)
TF32_PEAK_FLOPS = 494e12       # H100 SXM, dense TF32 tensor cores: vision with features.vision_dtype tf32 (the default)
MFU = 0.18                     # bf16 forward passes: language extraction as benchmarks/bench_device.py measured it on one
                               # H200 (17.9 %, benchmarks/device/2026-11-27-h200-after.json); 0.4 was assumed before any
                               # GPU run, and the time limits from it were too short
VISION_MFU = 0.30              # vision extraction, same run: 29.6 % of the TF32 peak (features.vision_dtype tf32)
TRAIN_MFU = 0.4                # fp32 training and Jacobians (LTE, bridge arms, seed 000): assumed, never measured
STARTUP_S = 60.0               # per job: interpreter, imports, CUDA context, dataset read (assumed)
LOAD_BYTES_PER_S = 2e9         # weights from a shared file system into GPU memory (assumed)
HBM_BYTES_PER_S = 3.35e12      # H100 SXM memory bandwidth (decoding reads every weight once per step)
CAPTION_TOKENS = 32            # tokens of one paired caption (WIT-style alt text; assumed)
DENSE_CAPTION_TOKENS = 1400    # tokens of one dense DCI caption
TOKENS_PER_WORD = 1.33
PLAN_COST_ENV = "PRH_PLAN_COST_JSON"  # set by `prh plan-cost`: the dry run writes its summary there
UNKNOWN_ITEMS = 10_000         # items of a dataset whose size neither meta.json nor params give
FP32_BYTES = 4                 # the training / Jacobian families load and run float32 weights
CLASS_NAME_TOKENS = 4          # a caption that is a class name (hub sets without a text column), with special tokens
COLOR_PROMPTS, COLOR_PROMPT_TOKENS = 3, 12  # color.TEMPLATES per term; the longest (8 words) + term + specials
# forward GMACs per image of CNNs and Swin at timm's input size (torch.utils.flop_counter); others: 2 P tokens
GMACS = {"resnet34": 3.66, "resnet50": 4.09, "convnext_small": 8.68, "convnext_base": 15.35, "efficientnet_b1": 0.57,
         "efficientnet_b2": 0.86, "swin_small_patch4_window7_224": 8.74, "swin_base_patch4_window7_224": 15.43}
TIMM_SHAPES = {"vit_small": (384, 12), "vit_base": (768, 12), "mixer_s": (512, 8), "mixer_b": (768, 12)}  # C, depth
TRANSFORMERS = {"gpt2": (12, 768), "minilm": (6, 384)}  # (blocks, width) of bridge backbones outside paper.models


def dataset_items(dataset: str, datasets: dict, results: str | Path) -> int:
    """Items of a dataset: its meta.json count when materialised, else params' ``n``, else UNKNOWN_ITEMS."""
    meta = Path(results) / "data" / dataset / "meta.json"
    if meta.exists():
        count = json.loads(meta.read_text()).get("count")
        if count:
            return int(count)
    return int((datasets.get(dataset) or {}).get("n") or UNKNOWN_ITEMS)



def vit_tokens(arch: str, stored: int) -> int:
    """(side / patch)^2 + 1 tokens of a timm ViT: patch and side from the name (``vit_base_patch16_224``: 16, 224;
    no patch: 16), side capped by the stored size; a name without a size (DINOv2) reads the stored 518 px."""
    patch = int(m.group(1)) if (m := re.search(r"patch(\d+)", arch)) else 16
    side = min(stored, int(m.group(1))) if (m := re.search(r"_(\d{3,4})\Z", arch)) else stored
    return (side // patch) ** 2 + 1



# lm-evaluation-harness tasks of Fig 4 (downstream.harness): (scored items, requests per item, tokens of one example
# with its answer, generated tokens per item at most). HellaSwag: 4 endings scored by likelihood, each request the
# whole few-shot prompt; GSM8K: one greedy generation of up to 256 tokens (the harness's max_gen_toks). Tokens
# per example are assumed (WikiHow/ActivityNet contexts with an ending; a GSM8K question with its worked answer).
HARNESS_TASKS = {"hellaswag": (10042, 4, 100, 0), "gsm8k": (1319, 1, 200, 256)}
