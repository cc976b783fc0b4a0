"""A real one-node SLURM cluster for the tests of this folder: ``tests/slurm/cluster.sh``.

The ``slurm`` fixture starts it (installing Debian's slurm-wlm and munge if missing) in a temporary
state directory and stops it after the last test, by PID, leaving no daemon behind. Where it cannot
start (not root, no apt-get to install the packages, a real SLURM config at /etc/slurm/slurm.conf),
the tests that use it are skipped with cluster.sh's reason. Only one test module uses it, so under
xdist's ``--dist loadfile`` one worker runs the cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cluster.sh"
sys.path.insert(0, str(HERE.parent))  # tests/: test_workflow's helpers


@dataclass
class Cluster:
    state: Path
    env: dict  # os.environ plus SLURM_CONF

    @property
    def partitions(self) -> Path:
        return self.state / "partitions.yaml"

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
        return proc


def _script(action: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), action], env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the SLURM cluster needs root (tests/slurm/cluster.sh runs munged and slurmd)")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "PRH_SLURM_STATE": str(state)}
    started = _script("start", env)
    if started.returncode == 3:
        pytest.skip(started.stderr.strip().splitlines()[-1])
    if started.returncode != 0:
        _script("stop", env)
        raise AssertionError(f"cluster.sh start failed ({started.returncode}):\n{started.stdout}\n{started.stderr}")
    cluster = Cluster(state=state, env={**env, "SLURM_CONF": str(state / "slurm.conf")})
    pids = {name: int((state / f"{name}.pid").read_text()) for name in ("munged", "slurmctld", "slurmd")}
    try:
        yield cluster
    finally:
        stopped = _script("stop", env)
        assert stopped.returncode == 0, stopped.stderr
        alive = [name for name, pid in pids.items() if Path(f"/proc/{pid}").exists()]
        assert not alive, f"cluster.sh stop left {alive} running"
