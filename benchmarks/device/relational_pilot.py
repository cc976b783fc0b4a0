"""A competence pilot for the language zoo (docs/language_zoo.md): which size and training budget makes a causal LM
of the shapes world learn the relational items and pass the left-most swap gate?

The registered zoo (presets/language.yaml: 2 x 48 and 3 x 64 GPT-2s, 3000 steps) learned no relation. This pilot
measures competence only: relational multiple-choice accuracy and the gate (``prh score-relational``) of runs on the
all-relational mix (``relational: 1.0``), at growing width, depth, steps and training scenes. It trains no vision
model and computes no alignment, so no alignment result is seen before the next zoo is registered. Every run trains
in its own process on one GPU (``train_language_model(device=...)``), several at once; after ``--deadline`` seconds
of training the runs still going are stopped and their saved checkpoints scored.

    python benchmarks/device/relational_pilot.py OUT_DIR [--tiny] [--deadline S]
    (--tiny: a CPU check of the script at toy sizes, minutes)
Writes OUT_DIR/pilot.json (runs, checkpoints, accuracy, gate, seconds) as it goes.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
TINY = "--tiny" in sys.argv
# name: (n_layer, n_embd, n_head, train set, levels kept (None: all six), steps)
RUNS = {
    "s_2x48": (2, 48, 2, "train4k", None, 20000),
    "m_3x64": (3, 64, 4, "train4k", None, 20000),
    "l_4x128": (4, 128, 4, "train4k", None, 20000),
    "xl_6x256": (6, 256, 8, "train4k", None, 20000),
    "l_4x128_16k": (4, 128, 4, "train16k", None, 20000),
    "xl_6x256_16k": (6, 256, 8, "train16k", None, 20000),
    "l_4x128_16k_dense": (4, 128, 4, "train16k", (4, 5), 20000),
}
CHECKPOINTS = [3000, 10000, 20000]
if "--long" in sys.argv:  # the second pilot: two runs alone on the card, as long as the deadline lets them go
    RUNS = {"m_3x64_16k_dense_long": (3, 64, 4, "train16k", (4, 5), 30000),
            "l_4x128_16k_dense_long": (4, 128, 4, "train16k", (4, 5), 30000)}
    CHECKPOINTS = [5000, 10000, 20000, 30000]
DATA = {"train4k": (4000, 1), "train4k_b": (4000, 3), "train4k_c": (4000, 4), "train4k_d": (4000, 5), "eval": (1024, 2)}
# a training set: its shapes dataset dirs (made in parallel; 16k = four 4,000-scene sets of other seeds)
SETS = {"train4k": ["train4k"], "train16k": ["train4k", "train4k_b", "train4k_c", "train4k_d"]}
if TINY:
    RUNS = {"s_2x48": (1, 16, 2, "train4k", None, 20), "l_4x128_16k_dense": (1, 16, 2, "train16k", (4, 5), 20)}
    CHECKPOINTS = [10, 20]
    DATA = {"train4k": (40, 1), "train4k_b": (20, 3), "train4k_c": (20, 4), "train4k_d": (20, 5), "eval": (64, 2)}
DEVICE = "cpu" if TINY else "cuda"


def prh(*args):
    return [sys.executable, "-c", "import sys; from prh.cli import entry; sys.argv[0] = 'prh'; entry()", *args]


def train_one(out: Path, name: str) -> None:
    """One run in this process: train, save each checkpoint, record its seconds."""
    import torch
    from transformers import AutoTokenizer

    from prh.models.language_zoo import caption_texts, save_checkpoint, train_language_model

    n_layer, n_embd, n_head, data, levels, steps = RUNS[name]
    tok = AutoTokenizer.from_pretrained(out / "tokenizer")
    texts = [t for d in SETS[data] for t in caption_texts(out / d, qa_pairs=3, seed=100, relational=1.0)]
    if levels is not None:  # caption_texts lists each item's six levels in order
        texts = [t for k, t in enumerate(texts) if k % 6 in levels]
    log = out / f"{name}.train.json"
    records = []

    def save(model, info):
        save_checkpoint(out / f"{name}_{info['steps']}", model=model, tokenizer=tok, info=info)
        records.append({k: info[k] for k in ("steps", "final_loss", "train_seconds", "n_params", "n_texts", "epochs")})
        log.write_text(json.dumps(records))

    torch.backends.cuda.matmul.allow_tf32 = True
    train_language_model(texts=texts, tokenizer=tok, arch="gpt2", n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                         steps=steps, seed=100, checkpoints=[c for c in CHECKPOINTS if c <= steps],
                         on_checkpoint=save, device=DEVICE)


def main(out: Path, deadline: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    src = str(HERE.parents[2] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])}
    res = {"device": DEVICE, "runs": {k: list(v) for k, v in RUNS.items()}, "checkpoints": CHECKPOINTS}
    dump = lambda: (out / "pilot.json").write_text(json.dumps(res, indent=1))  # noqa: E731
    t0 = time.time()
    procs = [subprocess.Popen(prh("make-shapes", "--out", str(out / d), "--n", str(n), "--seed", str(s)), env=env)
             for d, (n, s) in DATA.items()]
    assert all(p.wait() == 0 for p in procs), "make-shapes failed"
    subprocess.run(prh("train-tokenizer", "--data", str(out / "train4k"), "--out", str(out / "tokenizer")),
                   env=env, check=True)
    res["data_seconds"] = time.time() - t0
    if DEVICE == "cuda":
        import torch

        res["gpu"] = torch.cuda.get_device_name(0)
    dump()
    t1 = time.time()
    runs = {name: subprocess.Popen([sys.executable, str(HERE), str(out), "--train", name] + ["--tiny"] * TINY
                                   + ["--long"] * ("--long" in sys.argv),
                                   env=env, stdout=open(out / f"{name}.log", "w"), stderr=subprocess.STDOUT)
            for name in RUNS}
    while any(p.poll() is None for p in runs.values()) and time.time() - t1 < deadline:
        time.sleep(2)
    res["stopped"] = [n for n, p in runs.items() if p.poll() is None]
    for p in runs.values():
        if p.poll() is None:
            p.kill()
    res["train_wall_seconds"] = time.time() - t1
    res["train"] = {n: json.loads((out / f"{n}.train.json").read_text()) if (out / f"{n}.train.json").exists() else []
                    for n in RUNS}
    res["returncodes"] = {n: p.poll() for n, p in runs.items()}
    dump()
    models = sorted(d.name for d in out.iterdir() if d.is_dir() and (d / "config.json").exists())
    from prh.evaluation.relational import run_relational

    t2 = time.time()
    scored = run_relational(data=str(out / "eval"), names=models, models=[str(out / m) for m in models],
                            out=str(out / "relational.json"), n_items=400 if not TINY else 20,
                            n_pairs=200 if not TINY else 10, seed=0, alpha=0.05, device=DEVICE)
    res["score_seconds"] = time.time() - t2
    # in-sample: scenes the runs trained on (train4k is in every training set), the same items and gate
    seen = run_relational(data=str(out / "train4k"), names=models, models=[str(out / m) for m in models],
                          out=str(out / "relational_train.json"), n_items=400 if not TINY else 20,
                          n_pairs=200 if not TINY else 10, seed=0, alpha=0.05, device=DEVICE)
    res["scored_train_scenes"] = {m: {"accuracy": r["accuracy"], "chance": r["chance"],
                                      "followed": r["gate"]["followed"], "expected": r["gate"]["expected"]}
                                  for m, r in seen["models"].items()}
    res["scored"] = {m: {"accuracy": r["accuracy"], "chance": r["chance"], "followed": r["gate"]["followed"],
                         "expected": r["gate"]["expected"], "p": r["gate"]["p"], "passed": r["gate"]["passed"],
                         "by_direction": {d: v["accuracy"] for d, v in r["by_direction"].items()}}
                     for m, r in scored["models"].items()}
    dump()
    for m, r in res["scored"].items():
        print(f"{m:28s} acc {r['accuracy']:.3f} (chance {r['chance']:.3f})  gate {r['followed']}/"
              f"{r['expected']:.1f} p={r['p']:.2g}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2] / "src"))
    if "--train" in sys.argv:
        train_one(Path(sys.argv[1]), sys.argv[sys.argv.index("--train") + 1])
    else:
        dl = float(sys.argv[sys.argv.index("--deadline") + 1]) if "--deadline" in sys.argv else 330
        main(Path(sys.argv[1]), dl)
