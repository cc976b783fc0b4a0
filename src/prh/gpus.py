"""One set of GPUs per job on one machine (docs/paper_suite.md, "One machine, several GPUs").

Snakemake schedules GPU jobs by the count in ``resources: gpu=N`` but never says *which* cards a
job may use, so every CUDA job on an 8-GPU machine took ``cuda:0`` and ``device_map=auto``
spread the large models over all eight. Each GPU rule therefore runs ``prh --gpus N <command>``:
before the command imports torch, ``claim(N)`` takes N free device ids and exports them as
``CUDA_VISIBLE_DEVICES``, so the job sees exactly its cards as ``cuda:0 .. cuda:N-1``.

- A card is taken by an exclusive ``flock`` on ``<lock dir>/gpu<id>.lock``, held by the job's
  process until it exits (a killed job frees its cards; nothing to clean up). Claims are made
  under one machine-wide mutex, all N or none, so two jobs never deadlock on half sets.
- A job that finds fewer than N free cards waits (Snakemake without ``--resources gpu=<cards>``
  starts more GPU jobs than there are cards), saying so in its log once a minute.
- The pool is ``CUDA_VISIBLE_DEVICES`` when the user set it (a subset of the machine), else every
  card ``nvidia-smi -L`` lists (counted without initialising CUDA, which would freeze the
  variable). Under SLURM (``SLURM_JOB_ID``) the scheduler has already given the job its cards
  (``--gpus``): nothing is claimed.
- ``PRH_FAKE_GPU_COUNT=M`` pretends the machine has M cards: the replay and the tests exercise
  the assignment on a CPU with it (the jobs then run on the CPU, ``device: auto``).
- A job that asks for GPUs on a machine whose torch cannot use CUDA fails at once with one line
  naming the driver and torch's CUDA build, instead of ``device: auto`` falling back to the CPU
  and running a 70-billion-parameter model there for days.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prh.errors import ConfigError

__all__ = ["GPUS_FLAG", "FAKE_COUNT_ENV", "LOCK_DIR_ENV", "visible_pool", "claim", "release", "check_cuda", "setup_job",
           "exec_holding_gpus"]

GPUS_FLAG = "--gpus"
FAKE_COUNT_ENV = "PRH_FAKE_GPU_COUNT"
LOCK_DIR_ENV = "PRH_GPU_LOCK_DIR"
WAIT_LOG_S = 60.0
_HELD: list = []  # the open lock files of this process's claim: closed (freed) when it exits


def _lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "prh-gpu-locks")


def _nvidia_smi_count() -> int:
    """Cards ``nvidia-smi -L`` lists (0 without nvidia-smi or a driver); no CUDA initialisation."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def visible_pool(environ=None) -> list[str]:
    """Device ids a job may be given: ``CUDA_VISIBLE_DEVICES`` when set, else 0..M-1 (M: ``PRH_FAKE_GPU_COUNT``,
    else ``nvidia-smi -L``)."""
    env = os.environ if environ is None else environ
    if env.get(FAKE_COUNT_ENV):
        count = env[FAKE_COUNT_ENV]
        if not count.isdigit():
            raise ConfigError(f"{FAKE_COUNT_ENV}={count!r} must be a whole number of pretend GPUs")
        return [str(i) for i in range(int(count))]
    if env.get("CUDA_VISIBLE_DEVICES", "").strip():
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    return [str(i) for i in range(_nvidia_smi_count())]


def _try_take(pool: list[str], n: int, lock_dir: Path) -> list | None:
    """N lock files of free cards of ``pool``, all locked, or None (nothing kept)."""
    taken = []
    for dev in pool:
        f = open(lock_dir / f"gpu{dev}.lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        taken.append((dev, f))
        if len(taken) == n:
            return taken
    for _, f in taken:
        f.close()
    return None


def claim(n: int, *, environ=None, poll_s: float = 1.0, log=sys.stderr) -> list[str]:
    """Take ``n`` free cards of ``visible_pool`` for this process and export them as ``CUDA_VISIBLE_DEVICES`` (in
    ``environ``, default ``os.environ``); wait while fewer are free. Returns the ids ([] for n = 0 or under SLURM)."""
    env = os.environ if environ is None else environ
    if n < 0:
        raise ConfigError(f"--gpus {n}: a job asks for 0 or more GPUs")
    if n == 0 or env.get("SLURM_JOB_ID"):
        return []
    pool = visible_pool(env)
    if len(pool) < n:
        shown = (f"{FAKE_COUNT_ENV}={env[FAKE_COUNT_ENV]}" if env.get(FAKE_COUNT_ENV) else
                 f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if env.get("CUDA_VISIBLE_DEVICES", "").strip()
                 else f"nvidia-smi lists {len(pool)}")
        raise ConfigError(f"this job needs {n} GPU(s) but the machine has {len(pool)} ({shown}); run on a machine "
                          "with enough cards, or set `device: cpu` in params.yaml (a CPU run asks for no GPU)")
    lock_dir = _lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = last_log = time.monotonic()
    while True:
        with open(lock_dir / "claim.lock", "a+") as mutex:
            fcntl.flock(mutex, fcntl.LOCK_EX)
            taken = _try_take(pool, n, lock_dir)
        if taken is not None:
            break
        if time.monotonic() - last_log >= WAIT_LOG_S:
            last_log = time.monotonic()
            print(f"prh: waiting {last_log - start:.0f} s for {n} free GPU(s) of {len(pool)} "
                  f"(locks in {lock_dir}; run snakemake with --resources gpu={len(pool)} to start fewer jobs)",
                  file=log, flush=True)
        time.sleep(poll_s)
    _HELD.extend(f for _, f in taken)
    ids = [dev for dev, _ in taken]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    print(f"prh: this job's GPUs: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=log, flush=True)
    return ids


def release() -> None:
    """Free this process's cards now (tests; a job's cards are freed when it exits)."""
    while _HELD:
        _HELD.pop().close()


def _driver_version() -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "no nvidia-smi on PATH (no NVIDIA driver?)"
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed ({e})"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else \
        f"nvidia-smi failed ({(out.stderr or out.stdout).strip()[:200]})"


def check_cuda(n: int, environ=None) -> None:
    """A job given real GPUs must see CUDA in torch; else one error naming the driver and torch's CUDA build."""
    env = os.environ if environ is None else environ
    if n == 0 or env.get(FAKE_COUNT_ENV):
        return
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= n:
        return
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    raise ConfigError(
        f"this job asks for {n} GPU(s) but torch {torch.__version__} (built for CUDA {torch.version.cuda}) sees "
        f"{seen}; NVIDIA driver: {_driver_version()}. A driver older than the CUDA build cannot run it: update the "
        "driver, install the torch wheel of your CUDA (https://pytorch.org/get-started/locally/), or set "
        "`device: cpu` in params.yaml")


def exec_holding_gpus(argv: list[str]) -> None:
    """``prh --gpus N -- <program> ...``: replace this process by ``program`` (a launcher such as torchrun, whose
    workers inherit ``CUDA_VISIBLE_DEVICES``), the card locks passed on so they are held until it exits."""
    for f in _HELD:
        os.set_inheritable(f.fileno(), True)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        raise SystemExit(f"prh: cannot run {argv[0]!r} on the claimed GPUs: {e}") from None


def setup_job(argv: list[str]) -> list[str]:
    """``prh --gpus N <command> ...`` (or ``-- <program> ...``): claim and check the cards, and return the argv
    without the flag."""
    if argv[:1] != [GPUS_FLAG]:
        return argv
    if len(argv) < 2 or not argv[1].isdigit():
        raise ConfigError(f"{GPUS_FLAG} needs a whole number of GPUs before the command (prh --gpus 1 extract-vision "
                          "...)")
    n = int(argv[1])
    claim(n)
    check_cuda(n)
    return argv[2:]
