"""PRH Fig 4's downstream scores, computed: lm-evaluation-harness on every Fig 4 language model, one setting.

Fig 4 plots each LM's alignment to DINOv2 against its HellaSwag and GSM8K scores. The paper does
not say how those scores were obtained. Published numbers mix settings (0-shot in the model papers,
10-shot on the Open LLM Leaderboard, majority voting for GSM8K), and 8 of the 20 Fig 4 models have
none. So the DAG runs EleutherAI's lm-evaluation-harness (the version in requirements.lock) on every
model with ONE setting per task, read from ``params.yaml`` ``downstream.harness``. The default is
the Open LLM Leaderboard v1 setting, where these models' public numbers came from in 2024:

- HellaSwag: 10 shots drawn from train, every validation item (10,042), ``acc_norm`` (the ending
  with the highest log-likelihood per byte);
- GSM8K (config ``main``): 5 shots from train, every test item (1,319), greedy decoding until
  "Question:", ``exact_match`` of the number after "####" (filter ``strict-match``).

Each task's data is a hub dataset pinned like any other (``prh pin-revisions``): the task's own
yaml is included and its ``num_fewshot`` and ``dataset_kwargs.revision`` overridden. The model
loads through ``prh.models.loaders.load_language_model`` (same revision, dtype, device map and
tokenizer fixes as extraction) and is handed to the harness as an ``HFLM``.

    prh eval-harness --model bigscience/bloomz-560m --revision <sha> --name bloomz-560m \\
        --tasks '{"hellaswag": {"repo": "Rowan/hellaswag", "revision": "<sha>", "num_fewshot": 10,
                  "metric": "acc_norm", "filter": "none"}}' \\
        --out results/experiments/downstream/harness/bloomz-560m.json
    prh merge-harness --scores results/experiments/downstream/harness/*.json \\
        --out results/experiments/downstream/harness_scores.csv

The merged CSV has the columns of ``prh.studies.downstream.run.read_published_scores`` (percent,
origin ``lm-eval-harness``, the setting of each score), so ``prh run-downstream`` reads it as is.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import tempfile
from pathlib import Path

import yaml

from prh.errors import ConfigError, PRHError
from prh.io import atomic_path, read_json, write_json

__all__ = ["task_yaml", "evaluate_harness", "merge_harness", "main", "merge_main", "CONFIG", "PAPER_TASKS", "CSV_COLUMNS"]

# the params.yaml keys `prh eval-harness` reads (its rule's one --config argument, prh.slices)
CONFIG = {"downstream.harness": ("tasks", "limit", "batch_size", "fewshot_seed")}

PAPER_TASKS = ("hellaswag", "gsm8k")  # the tasks Fig 4 plots (the score columns of its CSV)
# the scores CSV `prh run-downstream` reads (published numbers or these runs): a score and its setting per task
CSV_COLUMNS = ("model", *PAPER_TASKS, *(f"{t}_setting" for t in PAPER_TASKS), "origin", "source")
SPEC_KEYS = ("repo", "revision", "num_fewshot", "metric", "filter")


def _check_tasks(tasks: dict) -> None:
    if not isinstance(tasks, dict) or not tasks:
        raise ConfigError(f"tasks={tasks!r} must map at least one task name to its setting "
                         "(params.yaml downstream.harness.tasks)")
    for name, spec in tasks.items():
        if name not in PAPER_TASKS:
            raise ConfigError(f"downstream.harness.tasks.{name}: Fig 4 plots only {list(PAPER_TASKS)}; remove {name!r}")
        missing = [k for k in SPEC_KEYS if k not in (spec or {})]
        if missing:
            raise ConfigError(f"downstream.harness.tasks.{name} lacks {missing}; give {list(SPEC_KEYS)}")


def task_yaml(name: str, spec: dict, folder: str | Path) -> Path:
    """A task file that includes the harness's own ``<name>.yaml`` and overrides its shots and data revision."""
    import lm_eval

    base = Path(lm_eval.__file__).parent / "tasks" / name / f"{name}.yaml"
    if not base.is_file():
        raise ConfigError(f"lm-evaluation-harness {lm_eval.__version__} has no task file {base}; "
                         f"task {name!r} is not one of its tasks")
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"include": str(base), "task": name, "num_fewshot": int(spec["num_fewshot"]),
                                    "dataset_kwargs": {"revision": spec["revision"]} if spec.get("revision") else {}}))
    return path


def _score(results: dict, name: str, spec: dict) -> dict:
    """The metric ``spec`` names from one task's harness results, in percent, with its standard error."""
    row = results["results"][name]
    key = f"{spec['metric']},{spec['filter']}"
    if key not in row:
        have = sorted(k for k in row if "," in k and "_stderr" not in k)
        raise ConfigError(f"downstream.harness.tasks.{name}: the harness reports no {key!r}; it reports {have}: "
                         "set metric and filter to one of them")
    err = row.get(f"{spec['metric']}_stderr,{spec['filter']}")
    n = results.get("n-samples", {}).get(name, {})
    used = results.get("configs", {}).get(name, {})  # what the harness ran: shots, data, split scored
    return {"score": 100.0 * float(row[key]),
            "harness_config": {k: used.get(k) for k in ("dataset_path", "dataset_name", "dataset_kwargs", "num_fewshot",
                                                        "fewshot_split", "validation_split", "test_split")},
            "stderr": None if err is None or err == "N/A" else 100.0 * float(err),
            "n_items": n.get("effective"), "n_available": n.get("original"),
            "setting": f"{int(spec['num_fewshot'])}-shot {spec['metric']}"
                       + ("" if spec["filter"] == "none" else f" ({spec['filter']})"),
            **{k: spec.get(k) for k in ("repo", "config", "revision", "num_fewshot", "metric", "filter")}}


def evaluate_harness(*, model: str, out: str | Path, tasks: dict, revision: str | None = None,
                     name: str | None = None, limit: int | None = None, batch_size: int = 8,
                     fewshot_seed: int = 1234, device: str = "auto", dtype: str = "auto",
                     device_map: str | None = None) -> dict:
    """Run the harness on one causal LM for every task of ``tasks``; write and return the scores.

    Parameters
    ----------
    model, revision : what ``load_language_model`` loads (hub id or a local ``save_pretrained`` folder).
    out : the result JSON (``results/experiments/downstream/harness/<name>.json``), written atomically.
    tasks : ``{task: {"repo", "revision", "num_fewshot", "metric", "filter"}}`` (params.yaml downstream.harness.tasks).
    name : the model name recorded (default: the last part of ``model``).
    limit : score only the first ``limit`` items of each task (None: all; then the score is the paper setting's).
    batch_size, fewshot_seed : requests per forward pass; seed of the few-shot draw.
    device, dtype, device_map : as ``prh score-lm``.

    Returns
    -------
    ``{"model", "source", "revision", "n_params", "dtype", "harness_version", "limit", "tasks": {task: {"score"
    (percent), "stderr", "n_items", "setting", ...}}}``
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from prh.device import place_model
    from prh.models import loaders

    _check_tasks(tasks)
    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit} must be >= 1 (or null: every item)")
    net, tok, dev, dt = loaders.load_causal_lm(model, revision=revision, device=device, dtype=dtype,
                                               device_map=device_map,
                                               needs="HellaSwag and GSM8K score next-token likelihoods and generations")
    place_model(net, dev, dt)
    lm = HFLM(pretrained=net, tokenizer=tok, batch_size=batch_size)
    with tempfile.TemporaryDirectory(prefix="prh-harness-") as folder:
        files = [str(task_yaml(task, spec, folder)) for task, spec in tasks.items()]
        # the task files include the harness's own by absolute path: no need to index its thousands of tasks
        res = lm_eval.simple_evaluate(model=lm, tasks=files, limit=limit, task_manager=TaskManager(include_defaults=False),
                                      fewshot_random_seed=fewshot_seed, random_seed=fewshot_seed,
                                      numpy_random_seed=fewshot_seed, torch_random_seed=fewshot_seed,
                                      log_samples=False, verbosity="WARNING")
    scores = {task: _score(res, task, spec) for task, spec in tasks.items()}
    for task, s in scores.items():
        print(f"{name or model}: {task} {s['setting']} = {s['score']:.2f}% over {s['n_items']} items", flush=True)
    result = {"model": name or str(model).rstrip("/").split("/")[-1], "source": str(model), "revision": revision,
              "n_params": loaders.count_params(net), "dtype": str(dt).removeprefix("torch."),
              "harness_version": lm_eval.__version__, "limit": limit, "batch_size": batch_size,
              "fewshot_seed": fewshot_seed, "tasks": scores}
    write_json(out, result)
    del net, lm
    loaders.free_model_memory()
    return result


def _read_scores(path: str | Path) -> dict:
    d = read_json(path)
    tasks = d.get("tasks") if isinstance(d, dict) else None
    if not isinstance(tasks, dict) or "model" not in d or any(
            not isinstance(t, dict) or not isinstance(t.get("score"), (int, float)) for t in tasks.values()):
        raise PRHError(f"{path}: not a `prh eval-harness` result (model, tasks.<task>.score); rerun that job "
                       f"(delete the file, then snakemake)")
    return d


def merge_harness(paths: list[str | Path], out: str | Path) -> list[dict]:
    """The per-model results as one CSV in ``read_published_scores``'s columns (percent; origin lm-eval-harness).

    Every file must score the same tasks with the same setting and ``limit``: Fig 4 compares models, so a
    mixed setting is an error, not a footnote."""
    if not paths:
        raise PRHError("no harness results to merge: pass the `prh eval-harness` JSONs")
    rows, settings = [], {}
    for path in paths:
        d = _read_scores(path)
        key = {t: (s["setting"], s.get("revision"), s.get("repo")) for t, s in sorted(d["tasks"].items())}
        key["limit"] = d.get("limit")
        settings.setdefault(repr(key), []).append(d["model"])
        rows.append(d)
    if len(settings) > 1:
        raise PRHError(f"the harness results use {len(settings)} different settings; Fig 4 needs one: "
                         + "; ".join(f"{s} for {m}" for s, m in settings.items()))
    names = [r["model"] for r in rows]
    if len(set(names)) < len(names):
        raise PRHError(f"models {sorted({n for n in names if names.count(n) > 1})} appear in several files")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        t = r["tasks"]
        lim = "" if r.get("limit") is None else f", first {r['limit']} items only"
        w.writerow([r["model"], *("" if x not in t or not math.isfinite(t[x]["score"]) else f"{t[x]['score']:.4f}"
                                  for x in PAPER_TASKS),
                    *(t[x]["setting"] if x in t else "" for x in PAPER_TASKS), "lm-eval-harness",
                    f"lm-evaluation-harness {r.get('harness_version')} run by this workflow ({r['source']} at "
                    f"revision {r.get('revision')}, {r.get('dtype')}{lim})"])
    header = ("# Fig 4's downstream scores (percent), computed by `prh eval-harness` with one setting for every "
              "model (params.yaml downstream.harness); merged by `prh merge-harness`.\n")
    with atomic_path(out) as tmp:
        Path(tmp).write_text(header + buf.getvalue())
    return rows


def main(argv: list[str] | None = None) -> None:
    from prh.device import DTYPES
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh eval-harness", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="hub repo id or save_pretrained folder")
    p.add_argument("--revision", default=None)
    p.add_argument("--name", default=None, help="model name recorded in the result")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    p.add_argument("--device-map", default=None, help="'auto' to spread a large model over devices")
    p.add_argument("--out", required=True, help="results/experiments/downstream/harness/<model>.json")
    settings = add_slice(p, CONFIG)  # tasks (no default: the rule, or --tasks JSON), limit, batch size, few-shot seed
    a = p.parse_args(argv)
    evaluate_harness(model=a.model, revision=a.revision, name=a.name, **settings(a)["downstream.harness"],
                     device=a.device, dtype=a.dtype, device_map=a.device_map, out=a.out)


def merge_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh merge-harness", description="merge `prh eval-harness` results into "
                                "the CSV `prh run-downstream` reads")
    p.add_argument("--scores", nargs="+", required=True, help="the per-model JSONs")
    p.add_argument("--out", required=True, help="results/experiments/downstream/harness_scores.csv")
    a = p.parse_args(argv)
    rows = merge_harness(a.scores, a.out)
    print(f"{a.out}: {len(rows)} models")
