"""The DVC remote over S3, on a tiny DVC project and a local S3 server (moto; the ``s3_server`` fixture):

- a file pushed to an S3 remote and pulled back is the same file (dvc-s3 installed, the endpoint and credentials read);
- without credentials, or without the remote, ``prh check-remote`` (what ``make pull`` and ``make push`` run before DVC
  touches the remote) is one line naming what the remote reads, no traceback;
- ``make pull`` and ``make push`` run it first.

The whole round trip of the workflow's results (push, fresh clone, ``make pull``, nothing planned) over the same server
is ``test_dvc_push_clone_pull_plans_nothing[s3]`` in tests/test_workflow.py, on the smoke run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from s3_env import S3_CREDENTIALS, S3_ISOLATED

BIN = Path(sys.executable).parent


def sh(cmd, cwd, env):
    """Run ``cmd`` with the virtualenv first on PATH, the user's AWS settings left out and ``env`` added."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          env={**base, "PATH": f"{BIN}{os.pathsep}{base['PATH']}", **S3_ISOLATED, **env})


@pytest.fixture
def project(tmp_path, s3_server):
    """A git + DVC project with one tracked file and, as its default remote, a fresh folder of the S3 server."""
    endpoint, creds = s3_server
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        assert sh(cmd, tmp_path, creds).returncode == 0
    (tmp_path / "data.txt").write_text("hello\n")
    for cmd in (["dvc", "add", "-q", "data.txt"],
                ["dvc", "remote", "add", "--local", "-d", "store", f"s3://prh/{tmp_path.name}"],
                ["dvc", "remote", "modify", "--local", "store", "endpointurl", endpoint]):
        proc = sh(cmd, tmp_path, creds)
        assert proc.returncode == 0, proc.stderr
    return tmp_path


def test_push_and_pull_over_s3(project, s3_server):
    _, creds = s3_server
    assert sh(["prh", "check-remote"], project, creds).stdout.strip() == f"DVC remote store (s3://prh/{project.name}): reachable"
    proc = sh(["dvc", "push"], project, creds)
    assert proc.returncode == 0 and "1 file pushed" in proc.stdout, proc.stdout + proc.stderr
    (project / "data.txt").unlink()
    sh(["rm", "-rf", ".dvc/cache"], project, {})
    proc = sh(["dvc", "pull"], project, creds)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / "data.txt").read_text() == "hello\n"


def one_line_error(proc) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_missing_credentials_are_one_line_naming_what_the_remote_reads(project):
    line = one_line_error(sh(["prh", "check-remote"], project, {}))  # S3_ISOLATED: no ~/.aws, no metadata service
    assert line.startswith(f"prh check-remote: cannot reach the DVC remote 'store' (s3://prh/{project.name})"), line
    assert "Unable to locate credentials" in line and "AWS_ACCESS_KEY_ID" in line and "AWS_SECRET_ACCESS_KEY" in line
    # what DVC itself says instead: an error and a footer (push), or two errors (pull)
    assert len(sh(["dvc", "push"], project, {}).stderr.strip().splitlines()) > 1


@pytest.mark.parametrize("args, expected", [(["-r", "nope"], "remote 'nope' doesn't exist"),
                                            ([], "no default dvc remote")], ids=["unknown", "no-default"])
def test_a_remote_that_is_not_configured_is_one_line(project, args, expected):
    if not args:
        assert sh(["dvc", "remote", "default", "--local", "--unset"], project, {}).returncode == 0
    line = one_line_error(sh(["prh", "check-remote", *args], project, dict(S3_CREDENTIALS)))
    assert line.startswith("prh check-remote: ") and expected in line.lower() and "dvc remote" in line.lower(), line


def test_make_pull_and_push_check_the_remote_before_dvc_touches_it(repo_root):
    makefile = (repo_root / "Makefile").read_text()
    for target, dvc in (("pull", "dvc pull"), ("push", "dvc push")):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
        assert "prh check-remote" in recipe and recipe.index("prh check-remote") < recipe.index(dvc), recipe
    assert recipe.index("prh check-remote") < recipe.index("dvc repro"), "push: before the repro it would waste"
