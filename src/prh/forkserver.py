"""A fork server for many short ``prh`` commands: the heavy libraries are imported once, and each command runs in
a process forked from the one that holds them.

A Snakemake job that runs ``prh <command>`` starts a new interpreter, and most of a small job's CPU is that
interpreter importing torch, torchvision, scikit-learn, SciPy and matplotlib (about 1.5 to 4 CPU-s a job here,
benchmarks/README.md). A run of hundreds of small jobs pays it hundreds of times. With a server started,

    python -m prh.forkserver /tmp/prh.sock &
    PRH_FORKSERVER=/tmp/prh.sock snakemake --cores all

each ``prh`` process sends its arguments, working directory, environment and standard streams to the server over
its Unix socket, and waits. The server forks; the fork forks the worker, which takes the streams, the directory
and the environment, applies the job's thread counts and runs the ``prh`` script (``prh.cli.entry``) with the
project's code imported afresh (no ``prh`` module is kept from the server). The ``prh`` process exits with the worker's
status, and passes SIGINT, SIGTERM and SIGHUP on to it; if it goes away, the worker is stopped.

What it does not do:

- It serves only a command whose environment equals the server's, but for what Snakemake sets per job (thread
  counts, the temporary folder), the shell's own variables and those of the workflow's tools (``PRH_*``,
  ``DVC_*``, ``SNAKEMAKE_*``). The libraries read their environment when they
  are imported (the Hugging Face offline switches, for one), so any other difference runs the command the
  ordinary way, in its own interpreter, as does a missing or dead server.
- A worker is not a child of the job, so Snakemake's ``benchmark:`` files and the ``PRH_RUSAGE_LOG`` lines
  measure the waiting ``prh`` process and the worker's own work, not the imports: use it where CPU time is
  not being measured (the test suite's whole-DAG runs), never for a run whose costs are recorded.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys
from contextlib import contextmanager
from pathlib import Path

FORKSERVER_ENV = "PRH_FORKSERVER"  # the server's socket; unset (the default): every command runs on its own

# What a worker would import anyway, and no module reads a job's environment when imported: imported once here.
PRELOAD = ("numpy", "torch", "torchvision", "scipy.stats", "scipy.linalg", "scipy.signal", "scipy.spatial",
           "sklearn.linear_model", "sklearn.preprocessing", "matplotlib", "matplotlib.pyplot", "safetensors.torch")
# Set per job by Snakemake (its threads and tmpdir resources) or by the shell: a job's values are applied.
THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
PER_JOB = {*THREAD_VARS, "TMPDIR", "TMP", "TEMP", "TEMPDIR", "PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "PS4"}
# Set by the workflow's own tools (prh's Snakefile, DVC's stage run, Snakemake), none of them read by a preloaded
# library; prh's own modules are imported afresh in each worker, so they read theirs.
WORKFLOW_PREFIXES = ("PRH_", "DVC_", "SNAKEMAKE_")
_HEADER = struct.Struct("!Q")


def _differing(env: dict[str, str], own: dict[str, str]) -> list[str]:
    """The variables, but for the per-job ones, that a job's environment sets otherwise than the server's."""
    keys = {k for k in set(env) | set(own) if k not in PER_JOB and not k.startswith(WORKFLOW_PREFIXES)}
    return sorted(k for k in keys if env.get(k) != own.get(k))


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("the prh process went away")
        data += part
    return data


def _run_worker(request: dict, fds: list[int]) -> None:
    """In the worker: take the job's streams, directory, environment and threads, then run the command."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(FORKSERVER_ENV, None)  # the worker runs the command: it must not send it back
    sys.path[0] = os.path.dirname(os.path.realpath(request["argv"][0]))  # as the console script's interpreter
    import tempfile

    tempfile.tempdir = None  # read TMPDIR again
    threads = request["env"].get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        import torch
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(int(threads))
        threadpool_limits(int(threads))
    import numpy

    numpy.random.seed()  # a fresh interpreter's global generator is seeded from the OS, not copied from the server
    for name in [m for m in sys.modules if m == "prh" or m.startswith("prh.")]:
        del sys.modules[name]  # the project's code as it is now, as a new interpreter would import it
    sys.argv = request["argv"]
    import runpy

    runpy.run_path(request["argv"][0], run_name="__main__")  # the prh console script, as its interpreter runs it


def _watch(conn: socket.socket, own_env: dict[str, str]) -> None:
    """In the fork: read the request; refuse it or fork the worker; report its pid, then its status."""
    head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
    (size,) = _HEADER.unpack(head + _recv_exact(conn, _HEADER.size - len(head)))
    request = json.loads(_recv_exact(conn, size))
    differing = _differing(request["env"], own_env)
    if differing or len(fds) != 3:
        print(f"ran on its own: {' '.join(request['argv'][1:2])}: differs in {differing or 'its streams'}", flush=True)
        conn.sendall(json.dumps({"refused": differing or ["the standard streams"]}).encode() + b"\n")
        return
    pid = os.fork()
    if pid == 0:
        conn.close()
        for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD"):  # as in a new interpreter, not the server's
            signal.signal(getattr(signal, name), signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)
        try:
            _run_worker(request, fds)
        finally:
            os._exit(1)  # the script did not end the process (prh.cli.entry does): a failure before the command ran
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    status = _wait_or_stop(conn, pid)
    print(f"served: {' '.join(request['argv'][1:2])} (pid {pid}): status {status}", flush=True)
    conn.sendall(json.dumps({"status": status}).encode() + b"\n")


def _wait_or_stop(conn: socket.socket, pid: int) -> int:
    """The worker's exit code (negative: the signal that ended it); SIGTERM it if the prh process goes away."""
    import select

    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(conn, select.POLLIN | select.POLLHUP)
    while True:
        ready = dict(poller.poll())
        if pidfd in ready:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if conn.fileno() in ready and not conn.recv(1, socket.MSG_PEEK):
            os.kill(pid, signal.SIGTERM)  # the waiting prh process was killed: so is its command
            poller.unregister(conn)


def serve(path: str | os.PathLike, preload=PRELOAD) -> None:
    """Import ``preload``, listen on the Unix socket ``path`` (created when ready), fork a watcher per command."""
    import importlib

    own_env = dict(os.environ)
    os.environ.setdefault("MPLBACKEND", "Agg")  # as prh.plots selects; importing pyplot must not pick a display
    for name in preload:
        importlib.import_module(name)
    os.environ.clear()
    os.environ.update(own_env)
    path = Path(path)
    ready = path.with_name(path.name + ".tmp")
    ready.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(ready))
    listener.listen(64)
    os.replace(ready, path)  # clients see the socket only once it accepts
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            conn, _ = listener.accept()
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                listener.close()
                try:
                    _watch(conn, own_env)
                finally:
                    os._exit(0)
            conn.close()
            while True:  # reap finished watchers (so their CPU adds to this process's children)
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        break
                except ChildProcessError:
                    break
    finally:
        path.unlink(missing_ok=True)
        while True:  # the last watchers, so that all their CPU counts as this process's children's
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def run_remote(path: str, argv: list[str]) -> int | None:
    """In a ``prh`` process: run ``argv`` through the server at ``path`` and return its exit status, or None when
    it cannot (no server there, or it refused this environment): the caller then runs the command itself."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError:
        return None
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    try:
        conn.sendmsg([_HEADER.pack(len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        conn.sendall(body)
    except OSError:  # a standard stream is closed: run it here
        return None
    replies = conn.makefile("r")
    first = json.loads(replies.readline() or "{}")
    if "pid" not in first:
        return None
    pid = first["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), forward)
    last = json.loads(replies.readline() or '{"status": 1}')
    status = last["status"]
    return 128 - status if status < 0 else status  # a signal's end, as the shell reports it


@contextmanager
def serving(folder: str | os.PathLike, env: dict[str, str], *, timeout: float = 120.0):
    """Start a server with environment ``env`` in ``folder``; yield the variable that sends commands to it."""
    import subprocess
    import tempfile
    import time

    path = Path(tempfile.mkdtemp(prefix="prh-fs-")) / "socket"  # short: a socket's path has at most 107 bytes
    log = open(Path(folder) / "prh-forkserver.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "prh.forkserver", str(path)], env=env, cwd=folder,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        start = time.monotonic()
        while not path.exists():
            if server.poll() is not None or time.monotonic() - start > timeout:
                raise RuntimeError(f"the prh fork server did not start: see {log.name}")
            time.sleep(0.05)
        yield {FORKSERVER_ENV: str(path)}
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
        path.parent.rmdir()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m prh.forkserver SOCKET")
    serve(sys.argv[1])
