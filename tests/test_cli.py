"""The ``prh`` console script (``prh.cli.entry``): a normal exit's status, output and clean-ups, without the teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


# buffered stdout, as under Snakemake's `> log` (PYTHONUNBUFFERED would hide a lost buffer)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def run_entry(tmp_path, argv: list[str], setup: str = "", call: str = "entry", stdout=subprocess.PIPE):
    """Run ``prh.cli.<call>`` in a fresh interpreter, as the console script does, after ``setup``."""
    finish = "cli.entry()" if call == "entry" else "sys.exit(cli.main())"
    script = "\n".join(["import sys", "from prh import cli", textwrap.dedent(setup), f"sys.argv = ['prh', *{argv!r}]", finish])
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=600, env=ENV)


SETUP = """
import atexit, pathlib, threading, time
out = pathlib.Path("out")
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.3)
    (out / "thread").write_text("joined")
threading.Thread(target=late).start()
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(2)  # never shut down: its idle workers must not hang the exit
pool.submit(lambda: (out / "pool").write_text("done"))
class Finaliser:  # a module global's finaliser: runs in the interpreter's teardown only
    def __del__(self):
        (out / "teardown").write_text("ran")
keep = Finaliser()
print("x" * 200_000)  # more than a pipe's buffer: all of it must be flushed
import ctypes
ctypes.CDLL(None).printf(b"from C\\n")  # C stdio's own buffer, which os._exit alone would drop
"""


def test_a_finished_command_exits_with_its_output_and_clean_ups_but_no_teardown(tmp_path):
    (tmp_path / "out").mkdir()
    done = run_entry(tmp_path, ["--help"], SETUP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("x" * 200_000) and "usage: prh <command>" in done.stdout and "from C" in done.stdout
    assert (tmp_path / "out" / "atexit").read_text() == "ran"
    assert (tmp_path / "out" / "thread").read_text() == "joined"
    assert (tmp_path / "out" / "pool").read_text() == "done"
    assert not (tmp_path / "out" / "teardown").exists()
    # the same script through a normal exit does run the finaliser: the check above can fail
    (tmp_path / "out" / "atexit").unlink()
    normal = run_entry(tmp_path, ["--help"], SETUP, call="main")
    assert normal.returncode == 0 and (tmp_path / "out" / "teardown").read_text() == "ran"


def test_a_user_error_is_one_line_and_status_1(tmp_path):
    done = run_entry(tmp_path, ["bench-summary", "--root", str(tmp_path / "none")])
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("prh bench-summary: ") and "none" in line
    unknown = run_entry(tmp_path, ["no-such-command"])
    assert unknown.returncode == 1 and "unknown command 'no-such-command'" in unknown.stderr


def test_a_bug_keeps_its_traceback(tmp_path):
    setup = 'import builtins\nbuiltins.boom = lambda argv: 1 / 0\ncli.COMMANDS["boom"] = "builtins:boom"'
    done = run_entry(tmp_path, ["boom"], setup)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr


def test_exit_statuses_are_the_interpreter_s(tmp_path):
    """argparse's 2 and a command's own SystemExit(None) pass through; a final flush that fails (a full disk under
    `> log`) exits 120, as CPython does, not 0; `python -m prh.cli` (torchrun's launch) goes the same way."""
    assert run_entry(tmp_path, ["bench-summary", "--no-such-option"]).returncode == 2
    setup = 'import builtins\nbuiltins.done = lambda argv: sys.exit()\ncli.COMMANDS["done"] = "builtins:done"'
    assert run_entry(tmp_path, ["done"], setup).returncode == 0
    with open("/dev/full", "w") as full:
        assert run_entry(tmp_path, ["--help"], stdout=full).returncode == 120
        assert run_entry(tmp_path, ["--help"], stdout=full, call="main").returncode == 120  # the interpreter's own
    module = subprocess.run([sys.executable, "-m", "prh.cli", "no-such-command"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env=ENV)
    assert module.returncode == 1 and "unknown command" in module.stderr



LISTS = [["--help"], ["plot", "--list"], ["run-color", "--help"]]  # every command's --help is a list of its arguments


def closed_pipe(tmp_path, argv: list[str], setup: str = "", *, read_first_line: bool) -> tuple[int, str]:
    """Run ``prh <argv>`` (after ``setup``) with stdout a pipe its reader closes at once, or after one line
    (`| head -1`); return the exit status and stderr."""
    script = "\n".join(["import sys", "from prh import cli", setup, f"sys.argv = ['prh', *{argv!r}]", "cli.entry()"])
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    if read_first_line:
        proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=600), err


@pytest.mark.parametrize("argv", LISTS, ids=lambda a: " ".join(a))
def test_a_closed_pipe_ends_a_listing_quietly(tmp_path, argv):
    """`prh plot --list | head -1`, the reader gone before the command prints: its buffered output fails
    at the exit's flush. No traceback, no message; status 141 (SIGPIPE's) or 0."""
    status, err = closed_pipe(tmp_path, argv, read_first_line=False)
    assert status in (0, 141) and err == "", (status, err)


def test_a_closed_pipe_while_printing_ends_quietly(tmp_path):
    """The reader gone after one line of a listing longer than a pipe holds: a write fails mid-way."""
    status, err = closed_pipe(tmp_path, ["--help"], "cli.usage = lambda: 'a command\\n' * 100_000",
                              read_first_line=True)
    assert status == 141 and err == "", (status, err)
