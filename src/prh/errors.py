"""The project's exceptions: each names the thing that is wrong and how to fix it."""

from __future__ import annotations

__all__ = ["ConfigError", "ModelNotAvailableError", "DatasetNotAvailableError", "CorruptFileError"]


class ConfigError(ValueError):
    """params.yaml is wrong; the message names the key and what is allowed."""


class ModelNotAvailableError(ValueError):
    """A hub model is neither in the local cache nor downloadable (no network / offline)."""


class DatasetNotAvailableError(ModelNotAvailableError):
    """A hub dataset is neither in the local cache nor downloadable (no network / offline)."""


class CorruptFileError(ValueError):
    """An artifact cannot be parsed (truncated by a killed job or a failed copy); the message names it."""

    def __init__(self, path, what: str, cause: BaseException, *, remedy: str | None = None):
        remedy = remedy or (f"delete it and rerun `snakemake {path}`, or restore it "
                            f"with `dvc checkout {path}` (or `dvc pull`)")
        super().__init__(
            f"{path} is not a readable {what} ({type(cause).__name__}: {cause}). It is probably truncated "
            f"(a killed job or an interrupted copy): {remedy}."
        )
        self.path = str(path)
