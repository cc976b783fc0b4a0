"""The project's exceptions: each names the thing that is wrong and how to fix it."""

from __future__ import annotations

import contextlib
import os

__all__ = ["PRHError", "ConfigError", "ModelNotAvailableError", "DatasetNotAvailableError", "CorruptFileError",
           "FeaturesError", "UsageError", "did_you_mean", "problems_message", "user_errors", "debugging", "DEBUG_ENV"]

DEBUG_ENV = "PRH_DEBUG"  # set (to anything but 0 or empty) for tracebacks of user errors (prh --debug does the same)


class PRHError(ValueError):
    """A user error: bad input the message names, with what to do. ``prh`` and the Snakefile print it as one line
    (no traceback unless ``--debug`` or ``PRH_DEBUG=1``). A ``ValueError``, so older ``except ValueError`` still hold."""


class ConfigError(PRHError):
    """params.yaml is wrong; the message names the key and what is allowed."""


class UsageError(PRHError):
    """A command was asked for something that does not exist (an unknown figure, model or file)."""


def did_you_mean(name: str, choices, *, kind: str = "name", listing: str | None = None) -> str:
    """``unknown <kind> 'x'`` plus the close matches among ``choices`` (difflib), or how to list them all."""
    import difflib

    choices = sorted(map(str, choices))
    close = difflib.get_close_matches(str(name), choices, n=3, cutoff=0.6)
    hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close else
            listing or ("none is defined" if not choices else
                        f"choose one of {', '.join(choices)}" if len(choices) <= 12 else f"{len(choices)} are defined"))
    return f"unknown {kind} {name!r}; {hint}"


def problems_message(header: str, problems: list[str]) -> str:
    """One line for one problem (``header: problem``), else the header and one indented line per problem."""
    lines = [p.strip() for p in problems]
    return f"{header}: {lines[0]}" if len(lines) == 1 else f"{header}:\n" + "\n".join(f"  {p}" for p in lines)


class ModelNotAvailableError(PRHError):
    """A hub model is neither in the local cache nor downloadable (no network / offline)."""


class DatasetNotAvailableError(ModelNotAvailableError):
    """A hub dataset is neither in the local cache nor downloadable (no network / offline)."""


class FeaturesError(PRHError):
    """Features unfit to score (NaN or inf rows, a constant model, values that overflow normalisation); the message
    names the file, model, layer and rows."""


class CorruptFileError(PRHError):
    """An artifact cannot be parsed (truncated by a killed job or a failed copy); the message names it."""

    def __init__(self, path, what: str, cause: BaseException, *, remedy: str | None = None):
        remedy = remedy or (f"delete it and rerun `snakemake {path}`, or restore it "
                            f"with `dvc checkout {path}` (or `dvc pull`)")
        super().__init__(
            f"{path} is not a readable {what} ({type(cause).__name__}: {cause}). It is probably truncated "
            f"(a killed job or an interrupted copy): {remedy}."
        )
        self.path = str(path)


def debugging() -> bool:
    """``PRH_DEBUG`` is set to anything but empty or 0 (``prh --debug`` sets it)."""
    return os.environ.get(DEBUG_ENV, "0") not in ("", "0")


@contextlib.contextmanager
def user_errors(prefix: str = ""):
    """Turn a ``PRHError`` into ``SystemExit(prefix + message)``: one line (a line per problem), exit status 1, no
    traceback, unless ``debugging()``. Other exceptions are bugs and pass through with their tracebacks."""
    try:
        yield
    except PRHError as e:
        if debugging():
            raise
        msg = f"{prefix}{e}"
        raise SystemExit(msg + ("\n(PRH_DEBUG=1 shows the traceback)" if "\n" in msg else "")) from None
