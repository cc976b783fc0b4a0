"""The project's exceptions: each names the thing that is wrong and how to fix it."""

from __future__ import annotations

__all__ = ["ConfigError", "ModelNotAvailableError", "DatasetNotAvailableError"]


class ConfigError(ValueError):
    """params.yaml is wrong; the message names the key and what is allowed."""


class ModelNotAvailableError(ValueError):
    """A hub model is neither in the local cache nor downloadable (no network / offline)."""


class DatasetNotAvailableError(ModelNotAvailableError):
    """A hub dataset is neither in the local cache nor downloadable (no network / offline)."""
