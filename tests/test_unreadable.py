"""The two chmod-000 cases: ``prh align`` on a features file nobody may read, ``prh check-config`` on an
unreadable config file. Root reads any file, so when the tests run as root the command runs as the unprivileged
user 65534 (``setpriv``, util-linux), for whom a mode-000 file is unreadable; as any other user it runs as is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prh.io import save_features

NOBODY = 65534


def as_user_without_root(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root needs setpriv (util-linux) to drop privileges for the unreadable-file cases"
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def run_prh(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRH_")}  # no job-side settings of other tests
    env = {**env, "HOME": str(cwd), "TQDM_DISABLE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run(as_user_without_root([sys.executable, "-m", "prh.cli", *args]), cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture
def world_readable_tmp(tmp_path):
    """A directory the unprivileged user can enter, list and write in (pytest's own tmp dirs are 0700)."""
    for d in [tmp_path, *tmp_path.parents]:
        if d == Path(d.anchor):
            break
        d.chmod(d.stat().st_mode | 0o755)
    tmp_path.chmod(0o777)
    return tmp_path


def one_line(proc: subprocess.CompletedProcess, command: str) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"prh {command}: "), proc.stderr
    return lines[0]


def test_align_on_an_unreadable_features_file_is_one_line(world_readable_tmp):
    d = world_readable_tmp
    for name in ("a", "b"):
        save_features(d / f"{name}.safetensors", torch.randn(12, 2, 4), {"model": name})
    os.chmod(d / "b.safetensors", 0)
    proc = run_prh(["align", "--metric", "mutual_knn", "--topk", "3", "--quantile", "0.95", "--x-names", "a", "b",
                    "--x-features", str(d / "a.safetensors"), str(d / "b.safetensors"), "--out", str(d / "o.json")],
                   d)
    line = one_line(proc, "align")
    assert "b.safetensors" in line and not (d / "o.json").exists()


def test_check_config_on_an_unreadable_file_is_one_line(world_readable_tmp):
    d = world_readable_tmp
    cfg = d / "c.yaml"
    cfg.write_text("seed: 0\n")
    os.chmod(cfg, 0)
    line = one_line(run_prh(["check-config", str(cfg)], d), "check-config")
    assert "c.yaml" in line
