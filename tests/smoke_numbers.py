"""The numbers of a smoke run, in a form a refactor can be checked against.

They are this machine's: a trained model's numbers depend on the float kernels the CPU
runs (MKL and oneDNN pick summation orders per CPU generation, ATen's vector paths per
instruction set), and training amplifies a last-bit difference into a different model
(the smoke ResNet's mean probe accuracy was 0.480 on one 2-core VM and 0.4625 on the next,
same code and pins). So a recording carries ``float_signature()``, a hash of seeded conv,
matrix and elementwise results, and is compared only on a machine with the same one.

Every number in ``results/experiments/**/*.json`` and ``results/alignment/**/*.json``
(timings left out: they are the machine's, not the method's; so are alignment tables'
best layer pairs, which ties make arbitrary). Small ``metrics.json``
files are kept key by key; for the others, a fingerprint that moves when any number
moves: the count, the sum, the sum of absolute values and a dot product with fixed
pseudo-random weights.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

# An alignment cell's best layer pair is arbitrary where layers tie to float32 precision (a model
# against itself: every layer pair scores 1 +- 1e-7, and which wins depends on the BLAS threads),
# so the pairs are left out; the scores are kept.
SKIPPED = re.compile(r"(^|_)(s|seconds|time|wall_s|cpu_s|elapsed|duration)$|^best_pairs$|seconds")
# LoRA-the-Explorer trains on 2 torchrun ranks: gloo's all-reduce order moves its float sums in the
# 4th-6th digit from run to run on this machine, so its numbers are not a regression fingerprint.
SKIPPED_DIRS = ("experiments/lte/",)


# Numbers no trained model and no training run touch (random networks and Gaussian products, pixel colour
# statistics of the generated world): what a CPU's float kernels change there is last-bit noise, which
# PORTABLE_REL absorbs, where a trained model amplifies it into another model. Any machine compares these
# (the regression never skips); a machine with the recording's float signature compares all.
PORTABLE = ("experiments/simplicity/products.json", "experiments/simplicity/random_nets.json",
            "experiments/color/vision.json")
PORTABLE_REL = 1e-4


def flatten(obj, prefix="") -> dict[str, float]:
    """Numbers by their path (``a.b.0``); timings and booleans left out, null as NaN."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if SKIPPED.search(str(k)):
                continue
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix[:-1]] = float(obj)
    elif obj is None:
        out[prefix[:-1]] = math.nan
    return out


def fingerprint(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    weights = [((i * 2654435761) % 1000) / 1000 - 0.5 for i in range(len(values))]
    return {"n": len(values), "n_nan": len(values) - len(finite), "sum": math.fsum(finite),
            "abs_sum": math.fsum(abs(v) for v in finite),
            "weighted": math.fsum(w * v for w, v in zip(weights, values) if math.isfinite(v))}


def float_signature() -> str:
    """A short hash of what this machine's CPU kernels make of seeded inputs, on one thread.

    Two machines with the same signature run the smoke DAG's float arithmetic alike; two
    with different ones do not, and their recorded numbers are not comparable.
    """
    import hashlib

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8, 3, 64, 64, generator=g)
        w = torch.randn(16, 3, 3, 3, generator=g, requires_grad=True)
        y = torch.nn.functional.conv2d(x, w, padding=1).relu()
        a, b = torch.randn(512, 384, generator=g), torch.randn(384, 256, generator=g)
        h = a @ b
        outs = [y, h, torch.nn.functional.gelu(h, approximate="tanh"), h.tanh(), h.log_softmax(1),
                torch.nn.functional.layer_norm(h, (256,))]
        y.square().mean().backward()
        outs.append(w.grad)
        digest = hashlib.sha256(b"".join(t.detach().contiguous().numpy().tobytes() for t in outs))
        return digest.hexdigest()[:16]
    finally:
        torch.set_num_threads(threads)


def smoke_numbers(results: str | Path) -> dict:
    results = Path(results)
    out = {}
    for sub in ("experiments", "alignment"):
        for path in sorted((results / sub).rglob("*.json")):
            numbers = flatten(json.loads(path.read_text()))
            key = str(path.relative_to(results))
            if key.startswith(SKIPPED_DIRS):
                continue
            out[key] = numbers if path.name.endswith("metrics.json") and len(numbers) <= 400 else fingerprint(
                list(numbers.values()))
    return out


def differences(got: dict, expected: dict, *, rel: float = 1e-6, abs_tol: float = 1e-9) -> list[str]:
    """Human-readable differences between two ``smoke_numbers`` results (empty when they agree): a recorded
    file or number missing, or a recorded number moved. What was not recorded (a study or a statistic added
    later) is not compared: a number added is not a number moved. A fingerprinted file is one number set."""
    problems = [f"{k}: missing from this run" for k in expected if k not in got]
    for k in expected.keys() & got.keys():
        a, b = got[k], expected[k]
        for key in sorted(b.keys() if "weighted" not in b else a.keys() | b.keys()):
            x, y = a.get(key), b.get(key)
            if x is None or y is None:
                problems.append(f"{k} {key}: {x} vs recorded {y}")
            elif not (math.isnan(x) and math.isnan(y)) and not math.isclose(x, y, rel_tol=rel, abs_tol=abs_tol):
                problems.append(f"{k} {key}: {x!r} vs recorded {y!r}")
    return problems
