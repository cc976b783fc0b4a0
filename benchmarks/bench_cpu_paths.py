"""Is any CPU path slower than before the GPU extraction and k-NN changes of 2026-11-26? The same workloads on a base commit's code and on this tree's, in one run.

Those changes moved the extraction and k-NN paths for the GPU (pooled states kept on the device, preprocessing on the
model's device, batches sized from a memory budget, certified bf16 k-NN, CPU blocks sized from RAM above N =
32,768). On a CPU none of that may cost time. This script exports the base commit (default d1ac618, the code the
issue measured) into a temporary folder with `git archive`, then runs each workload in a fresh subprocess with
PYTHONPATH at the base's src/ and at this tree's, alternating, and prints seconds and the ratio base / head
(> 1: this tree is faster). Random weights and data, float32, the thread count of OMP_NUM_THREADS (default 2).

    python benchmarks/bench_cpu_paths.py [--base d1ac618] [--repeats 3]

Workloads: language extraction (a 4 x 256 Llama, 256 captions, batch 32), vision extraction (timm ViT-Ti/16 and a
ResNet-18, 64 images at 224 px, batch 64), exact k-NN (N = 4 x 10^4 unit vectors, d = 768, k = 10, default
blocks: 419 rows before, 512 now).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = r'''
import sys, time, numpy as np, torch
torch.manual_seed(0)
which = sys.argv[1]
if which == "language":
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from prh.features import extract_language_features
    rng = np.random.default_rng(0)
    words = "red green blue small large circle square left right above below the a of and".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(20, 90)))) for _ in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<pad>", "<s>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4)).eval()
    run = lambda: extract_language_features(model, tok, texts, batch_size=32, device="cpu", progress=False)
elif which in ("vit", "resnet"):
    import timm
    from prh.features import extract_vision_features
    name = "vit_tiny_patch16_224" if which == "vit" else "resnet18"
    model = timm.create_model(name, pretrained=False).eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    imgs = np.random.default_rng(0).integers(0, 256, size=(64, 224, 224, 3), dtype=np.uint8)
    run = lambda: extract_vision_features(model, imgs, pooling="cls" if which == "vit" else "avg", mean=cfg["mean"],
                                          std=cfg["std"], input_size=cfg["input_size"], batch_size=64, device="cpu",
                                          progress=False)
else:
    from prh.metrics.knn import knn
    x = torch.nn.functional.normalize(torch.randn(40000, 768), dim=1)
    run = lambda: knn(x, 10)
run()  # warm-up (first calls allocate and pick kernels)
t0 = time.perf_counter()
run()
print(time.perf_counter() - t0)
'''


def export(base: str, folder: Path) -> Path:
    archive = subprocess.run(["git", "archive", base, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def seconds(src: Path, which: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    out = subprocess.run([sys.executable, "-c", WORKLOAD, which], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="d1ac618")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side; the best counts")
    p.add_argument("--workloads", nargs="+", default=["language", "vit", "resnet", "knn"])
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="prh-base-") as tmp:
        base_src = export(a.base, Path(tmp))
        print(f"{'workload':<10}{'base s':>9}{'head s':>9}{'base/head':>11}")
        for which in a.workloads:
            runs = {"base": [], "head": []}
            for _ in range(a.repeats):  # alternate, so drift hits both sides alike
                runs["base"].append(seconds(base_src, which))
                runs["head"].append(seconds(ROOT / "src", which))
            b, h = min(runs["base"]), min(runs["head"])
            print(f"{which:<10}{b:>9.3f}{h:>9.3f}{b / h:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
