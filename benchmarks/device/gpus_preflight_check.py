"""On a real GPU: prh --gpus claims the card, a job asking for more cards than the machine has fails in one
line, and the pre-flight's one-batch check runs a tiny Llama and ViT on CUDA, plus streamed hooks on CUDA."""
import json
import os
import subprocess
import sys
import tempfile
sys.path.insert(0, "tests")
out = {}
env = {**os.environ, "PRH_GPU_LOCK_DIR": tempfile.mkdtemp()}
prh = [sys.executable, "-c", "import sys; from prh.cli import entry; sys.argv[0]='prh'; entry()"]
p = subprocess.run(prh + ["--gpus", "1", "--", sys.executable, "-c",
                   "import os, torch; print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.device_count(), torch.cuda.get_device_name(0))"],
                   env=env, capture_output=True, text=True)
out["claim_one"] = {"rc": p.returncode, "stdout": p.stdout.strip(), "stderr": p.stderr.strip()[-300:]}
p = subprocess.run(prh + ["--gpus", "2", "check-config"], env=env, capture_output=True, text=True)
out["claim_two_on_one"] = {"rc": p.returncode, "stderr": p.stderr.strip()[-400:]}
from tiny_models import save_language_model, save_vision_zoo
d = tempfile.mkdtemp()
cfg = {"paper": {"models": {
    "lm": {"repo": str(save_language_model("llama", f"{d}/lm")), "modality": "language", "family": "llama", "n_params": 1e6},
    "gpt": {"repo": str(save_language_model("gpt2", f"{d}/gpt")), "modality": "language", "family": "gpt2", "n_params": 1e6},
    "vit": {"repo": str(save_vision_zoo("vit", f"{d}/vit")), "modality": "vision", "family": "vit", "n_params": 1e5}}},
    "cluster": {"gpu_memory_gb": 80}}
from prh.preflight import check_models
checked, problems = check_models(cfg, list(cfg["paper"]["models"]), device="cuda", cards=1)
out["preflight_models_cuda"] = {"checked": checked, "problems": problems}
import torch
import warnings
from prh.models.loaders import load_language_model
from prh.features import extract_language_features
m, tok = load_language_model(f"{d}/lm", dtype=torch.bfloat16)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    f = extract_language_features(m, tok, ["a red circle", "two blue squares above a green triangle"], device="cuda",
                                  dtype=torch.bfloat16, gpu_memory_budget_gb="auto", progress=False)
out["streamed_cuda"] = {"shape": list(f.shape), "finite": bool(torch.isfinite(f).all()), "warnings": [str(x.message)[:200] for x in w]}
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ["OUT"], "run4.json"), "w"), indent=1)
