"""Bad arguments for every ``prh`` command, generated from the command's own argparse spec: a new command
or argument is covered without editing this file.

For each argument that names a path (by its name, metavar or help), the cases are: it is missing; it is the wrong
kind of thing (a directory where a file is read or written, a file where a directory is); it is in the wrong format
(garbage bytes, an empty file, JSON of the wrong shape, an empty directory). For each integer, a negative value and
one beyond the 64-bit integers; for each float, NaN. The other required arguments get harmless fillers (outputs in a
fresh folder, inputs that do not exist), so a command may stop at another argument first: what is asserted is what a
user sees for any of them. Each case runs in-process (``prh.cli.main``) in an empty folder, offline, and must exit
non-zero with one line, ``prh <command>: ...``, and no traceback."""

from __future__ import annotations

import argparse
import importlib
import re
import signal

import pytest

from prh import cli

PATH_HELP = re.compile(r"\b(files?|dir|directory|folder|json|jsonl|safetensors|yaml|csv|tsv|tar|txt|checkpoints?|"
                       r"written|write|path|features|ledger)\b|\.json|\.yaml|\.safetensors|\.csv|\.tar", re.I)
PATH_NAMES = {"out", "params", "lock", "config", "data", "source", "archive", "root", "effective", "configfile"}
DIR_HELP = re.compile(r"\b(dir|directory|folder)\b|/$|results/experiments$", re.I)
OUT_HELP = re.compile(r"\b(written|to write|output)\b", re.I)
FILLERS = {"metric": ["mutual_knn"], "topk": ["2"], "quantile": ["0.95"], "modality": ["vision"],
           "plot name": ["claims_ledger"]}
# cases a command accepts on purpose, or cannot report in one line, and why (left out of the generation)
NOT_ERRORS = {
    "check-lock --effective missing": "results from before the effective config was recorded have none (it says so)",
    "bench-summary --root an empty directory": "no benchmark files yet: an empty table",
    "plan-cost": "it relays a failed snakemake dry run's own output (several lines), and needs the repo's Snakefile",
    "check-remote": "its one argument is a remote's name, no path or number; an unknown remote, no default remote and "
                    "missing credentials are one line in tests/test_dvc_remote.py",
}
NOT_PATHS = {"name", "names", "revision", "split", "arch", "objective", "device", "dtype", "device_map", "run",
             "suite", "language", "tasks", "models_names", "x_names", "y_names", "snakemake_args"}


class Captured(Exception):
    def __init__(self, parser):
        super().__init__(parser.prog)
        self.parser = parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser ``command`` builds: its function is called with parsing replaced by a capture, so nothing runs."""
    module, func = cli.COMMANDS[command].split(":")
    target = getattr(importlib.import_module(module), func)

    def capture(self, args=None, namespace=None):
        raise Captured(self)

    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = capture
    try:
        target([])
    except Captured as got:
        return got.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise AssertionError(f"prh {command} builds no argparse parser")


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._StoreConstAction, argparse._SubParsersAction))]


def parsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(the words that choose it, parser) for the parser and each of its sub-commands (``prh run-color vision``)."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from parsers(sub, prefix + (word,))


def is_path(action: argparse.Action) -> bool:
    if action.dest in NOT_PATHS or action.choices or action.type in (int, float) or action.nargs == 0:
        return False
    if getattr(action.type, "__name__", "") in ("json_object", "slice_json", "loads", "_override"):
        return False
    metavar = str(action.metavar or "")
    return (action.dest in PATH_NAMES or "PATH" in metavar or "JSON" in metavar or "LEDGER" in metavar
            or bool(PATH_HELP.search(action.help or "")))


def wrap(action: argparse.Action, value: str) -> str:
    """``value`` in the argument's syntax: ``KEY=PATH`` gets a key, ``STUDY:KEY=PATH`` a study and a key."""
    metavar = str(action.metavar or "")
    return re.sub(r"[A-Z_]+(?=[:=])", "x", metavar.rsplit("PATH", 1)[0]) + value if metavar.endswith("PATH") else value


def filler(command: str, action: argparse.Action) -> list[str]:
    for key in (f"{command} {action.dest}", action.dest):
        if key in FILLERS:
            return FILLERS[key]
    if action.choices:  # the last: the fullest variant (cpu of auto/cuda/cpu, the experiment reading every input)
        return [str(list(action.choices)[-1])]
    if is_path(action):
        value = f"out/{action.dest}" if OUT_HELP.search(action.help or "") or action.dest.startswith("out") else \
            f"absent/{action.dest}"
        return [wrap(action, value)]
    if action.type is int:
        return ["2"]
    if action.type is float:
        return ["0.5"]
    if getattr(action.type, "__name__", "") in ("json_object",):
        return ["{}"]
    if getattr(action.type, "__name__", "") == "loads":
        return ["[]"]
    return ["a"]


def bad_values(action: argparse.Action) -> dict[str, str]:
    """What-it-is -> the bad value, for one argument (paths are relative to the case's empty folder)."""
    if is_path(action):
        output = OUT_HELP.search(action.help or "") or action.dest.startswith("out")
        if DIR_HELP.search(action.help or ""):
            if output:  # a missing one is made
                return {"a file for a directory": "garbage.bin"}
            return {"missing": "absent/dir", "a file for a directory": "garbage.bin", "an empty directory": "empty_dir"}
        if output:
            return {"a directory for an output file": "empty_dir"}
        return {"missing": "absent.json", "a directory": "empty_dir", "garbage bytes": "garbage.bin",
                "an empty file": "empty.json", "JSON of the wrong shape": "list.json"}
    if action.type is int:  # no command documents a bound on its own: beyond 64 bits is out of range for any
        return {"beyond 64 bits": str(10 ** 30)}
    if action.type is float:
        return {"NaN": "nan"}
    return {}


def argv_with(command: str, parser: argparse.ArgumentParser, bad: argparse.Action, value: str) -> list[str]:
    argv: list[str] = []
    positional: list[str] = []
    for action in arguments(parser):
        if action is bad:
            values = [wrap(action, value)]
        elif action.required or (not action.option_strings and action.nargs not in ("*", "...")
                                 and (action.nargs != "?" or f"{command} {action.dest}" in FILLERS)):
            values = filler(command, action)
        else:
            continue
        if action.option_strings:
            argv += [action.option_strings[-1], *values]
        else:
            positional += values
    return argv + positional  # a positional may take the rest (plan-cost's snakemake arguments)


def generate() -> list[tuple[str, str, list[str]]]:
    """(command, what is wrong, argv) for every command and argument."""
    found = []
    for command in cli.COMMANDS:
        if command in NOT_ERRORS:
            continue
        for words, parser in parsers(command_parser(command)):
            for action in arguments(parser):
                for what, value in bad_values(action).items():
                    name = " ".join([*words, action.option_strings[-1] if action.option_strings else action.dest])
                    if f"{command} {name} {what}" not in NOT_ERRORS:
                        found.append((command, f"{name} {what}", [*words, *argv_with(command, parser, action, value)]))
    return found


CASES = generate()


def test_every_command_has_cases():
    commands = {c for c, _, _ in CASES}
    without = sorted(set(cli.COMMANDS) - commands - set(NOT_ERRORS))
    # a command with no path or number among its arguments has nothing to generate: none now
    assert not without, without
    assert len(CASES) > 300


class Hung(Exception):
    pass


def _hung(signum, frame):
    raise Hung("still running after 30 s: the bad input was not refused up front")


@pytest.fixture(autouse=True)
def torch_state():
    """Commands set torch's threads and deterministic mode for their process: put them back for the next test."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize("command, what, argv", CASES, ids=[f"{c} {w}" for c, w, _ in CASES])
def test_bad_argument_is_one_line(tmp_path, monkeypatch, capsys, command, what, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "garbage.bin").write_bytes(b"\x89\x00\xff\xfe garbage \x00" * 8)
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "list.json").write_text("[1, 2]\n")
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(30)
    try:
        with pytest.raises(SystemExit) as stop:
            cli.main([command, *argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    message = stop.value.code
    assert message not in (None, 0), f"prh {command} {' '.join(argv)} succeeded"
    assert "Traceback" not in err, err
    if isinstance(message, int):  # argparse's own refusal: its usage line, then `prh <command>: error: ...`
        assert message == 2 and err.strip().splitlines()[-1].startswith(f"prh {command}: error: "), err
    else:
        assert message.startswith(f"prh {command}: ") and "\n" not in message.strip(), message
