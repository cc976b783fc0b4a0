"""The prh fork server (prh.forkserver): a command sent to it behaves as the same command run on its own (output,
status, files, working directory, thread count), a job whose environment differs runs on its own, and a killed
``prh`` process stops its worker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_workflow import BIN, full_env

from prh.forkserver import FORKSERVER_ENV, PER_JOB, WORKFLOW_PREFIXES, _differing, serving


def _prh(args, cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "prh"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server with the heavy libraries imported, and the environment it was started with."""
    folder = tmp_path_factory.mktemp("forkserver")
    env = full_env()
    with serving(folder, env) as extra:
        yield {"env": env, "extra": extra, "log": folder / "prh-forkserver.log"}


def _served_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith(("served:", "ran on its own:"))]


@pytest.mark.parametrize("args", [["--help"], ["no-such-command"], ["check-config", "--configfile", "missing.yaml"],
                                  ["plot", "--list"]])
def test_a_served_command_prints_and_exits_as_one_run_on_its_own(server, tmp_path, args):
    before = len(_served_lines(server["log"]))
    alone = _prh(args, tmp_path, server["env"])
    served = _prh(args, tmp_path, {**server["env"], **server["extra"]})
    assert (served.returncode, served.stdout, served.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    lines = _served_lines(server["log"])[before:]
    assert len(lines) == 1 and re.fullmatch(rf"served: {re.escape(args[0])} \(pid \d+\): status {alone.returncode}",
                                            lines[0]), lines


def test_a_served_command_works_in_the_job_s_folder_with_its_threads_and_temporary_folder(server, tmp_path):
    """A shapes dataset written through the server equals one written on its own, byte for byte; the worker
    runs in the job's folder and sees the job's OMP_NUM_THREADS and TMPDIR (what Snakemake sets per job)."""
    args = ["make-shapes", "--out", "shapes", "--n", "24", "--seed", "3"]
    for name, extra in (("alone", {}), ("served", server["extra"])):
        folder = tmp_path / name
        folder.mkdir()
        env = {**server["env"], **extra, "OMP_NUM_THREADS": "2", "TMPDIR": str(folder)}
        proc = _prh(args, folder, env)
        assert proc.returncode == 0, proc.stderr
    alone = sorted(p.relative_to(tmp_path / "alone") for p in (tmp_path / "alone").rglob("*") if p.is_file())
    assert alone and alone == sorted(p.relative_to(tmp_path / "served")
                                     for p in (tmp_path / "served").rglob("*") if p.is_file())
    for rel in alone:
        assert (tmp_path / "alone" / rel).read_bytes() == (tmp_path / "served" / rel).read_bytes(), rel
    assert _served_lines(server["log"])[-1].startswith("served: make-shapes")


def test_a_job_whose_environment_differs_runs_on_its_own(server, tmp_path):
    env = {**server["env"], **server["extra"], "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") else "1"}
    proc = _prh(["--help"], tmp_path, env)
    assert proc.returncode == 0 and "usage: prh" in proc.stdout
    assert _served_lines(server["log"])[-1] == "ran on its own: --help: differs in ['HF_HUB_OFFLINE']"


def test_what_snakemake_and_the_shell_set_per_job_may_differ():
    own = {"HOME": "/root", "OMP_NUM_THREADS": "1"}
    job = {"HOME": "/root", "OMP_NUM_THREADS": "4", "TMPDIR": "/scratch", "SHLVL": "2", FORKSERVER_ENV: "/s",
           "DVC_STAGE": "workflow", "SNAKEMAKE_PROFILE": "x"}
    assert _differing(job, own) == [] and {"OMP_NUM_THREADS", "TMPDIR"} <= PER_JOB and "PRH_" in WORKFLOW_PREFIXES
    assert _differing({**job, "HF_HOME": "/elsewhere"}, own) == ["HF_HOME"]
    assert _differing({k: v for k, v in job.items() if k != "HOME"}, own) == ["HOME"]


def test_no_server_at_the_socket_runs_the_command_on_its_own(tmp_path):
    proc = _prh(["--help"], tmp_path, full_env({FORKSERVER_ENV: str(tmp_path / "none.sock")}))
    assert proc.returncode == 0 and "usage: prh" in proc.stdout


def _sleeping_server(folder: Path) -> subprocess.Popen:
    """A server whose worker sleeps instead of running a command (the plumbing alone, no prh command waits)."""
    code = ("import sys, time, prh.forkserver as f\n"
            "f._run_worker = lambda request, fds: (open(request['cwd'] + '/started', 'w').close(), time.sleep(60))\n"
            "f.serve(sys.argv[1], preload=())\n")
    server = subprocess.Popen([sys.executable, "-c", code, str(folder / "s.sock")], env=full_env())
    for _ in range(600):
        if (folder / "s.sock").exists():
            return server
        time.sleep(0.05)
    server.kill()
    raise AssertionError("the test server did not start")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_prh_process_stops_its_worker(tmp_path, how):
    """SIGTERM is passed on to the worker (status 143, as the shell reports it); after SIGKILL, which cannot be
    passed on, the watcher sees the connection close and stops the worker."""
    server = _sleeping_server(tmp_path)
    try:
        client = subprocess.Popen([str(BIN / "prh"), "anything"], cwd=tmp_path,
                                  env=full_env({FORKSERVER_ENV: str(tmp_path / "s.sock")}))
        for _ in range(600):
            if (tmp_path / "started").exists():
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the worker never started")
        workers = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 1  # the watcher; its child is the worker
        worker = int(subprocess.run(["pgrep", "-P", workers[0]], capture_output=True, text=True).stdout.split()[0])
        client.send_signal(getattr(signal, how))
        assert client.wait(timeout=30) == (143 if how == "SIGTERM" else -9)
        for _ in range(600):
            if not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the worker still runs")
    finally:
        server.terminate()
        server.wait(timeout=30)
