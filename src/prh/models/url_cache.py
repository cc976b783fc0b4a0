"""Plain-URL checkpoints: fetched once into a cache, their SHA-256 pinned on first fetch (``prh pin-checkpoints``).

Hub checkpoints are pinned by commit (``prh pin-revisions``). Weights published behind a plain URL (the Baradad et
al. encoders, MoCo's) have no commit: what pins them is the SHA-256 of the file. ``workflow/resources/checkpoints.yaml``
declares each (URL, architecture, key layout); its ``sha256`` is taken from the declaration when it has one, else from
the **lock file** (``paper.checkpoints.lock``, default ``workflow/resources/checkpoints.lock.yaml``: URL -> SHA-256).
A URL neither names is pinned on its first fetch: the hash of what was downloaded is written into the lock (commit
it), and every later fetch or load, here or on another machine, must match it. ``prh pin-checkpoints``
(``prh.models.checkpoints.pin_main``) fetches and pins every one of a config at once.

The cache is ``$PRH_CHECKPOINT_CACHE``, else ``$HF_HOME/prh-checkpoints`` (so a stand-in hub's own ``HF_HOME`` keeps
stand-ins apart from real weights): ``<cache>/<first 16 hex of SHA-256(url)>/<file name>``. A download streams into
a temporary file beside it, hashed as it goes, and is renamed into place only once its hash is accepted: a killed
download or a wrong file never sits at the cache path. ``HF_HUB_OFFLINE=1`` (the replay's setting) forbids network
fetches (``file://`` URLs are read).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import yaml

from prh.errors import ConfigError, ModelNotAvailableError

__all__ = ["CACHE_ENV", "LOCK_HEADER", "cache_root", "cache_path", "read_lock", "record_sha256", "expected_sha256",
           "fetch_checkpoint", "mismatch_error"]

CACHE_ENV = "PRH_CHECKPOINT_CACHE"
CHUNK = 1 << 20
LOCK_HEADER = ("# SHA-256 of every plain-URL checkpoint (workflow/resources/checkpoints.yaml), recorded on its first\n"
               "# fetch by the loader or `prh pin-checkpoints` (prh.models.url_cache); commit this file. A later fetch\n"
               "# that differs is refused. Edit by hand only to re-pin a file its publisher replaced on purpose.\n")


def cache_root() -> Path:
    """``$PRH_CHECKPOINT_CACHE``, else ``$HF_HOME/prh-checkpoints`` (read now, not at import)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "prh-checkpoints"


def cache_path(url: str, root: str | os.PathLike | None = None) -> Path:
    """Where ``url`` is cached: ``<root>/<16 hex of SHA-256(url)>/<its file name>``."""
    name = Path(urlparse(url).path).name or "checkpoint"
    return Path(root or cache_root()) / hashlib.sha256(url.encode()).hexdigest()[:16] / name


def read_lock(lock: str | os.PathLike) -> dict[str, str]:
    """URL -> SHA-256 of a lock file ({} when it does not exist yet)."""
    path = Path(lock)
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ConfigError(f"{path}: a checkpoint lock maps each URL to its SHA-256 (`url: hex`); fix or delete it")
    return data


@contextlib.contextmanager
def _locked(folder: Path):
    """An exclusive ``flock`` on ``folder`` itself: concurrent jobs record into one lock file in turn."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def mismatch_error(*, name: str, url: str, expected: str, actual: str, where: str, path: Path) -> ConfigError:
    """The one-line refusal of a file whose SHA-256 is not the pinned one."""
    return ConfigError(
        f"checkpoint {name}: {url} has SHA-256 {actual}, but {where} pins {expected}; the file at that URL changed or "
        f"the copy is corrupt, and it is not loaded. Delete {path} and rerun to fetch it again; if its publisher "
        f"replaced it on purpose, remove its line from {where}, rerun `prh pin-checkpoints` and commit the new hash")


def record_sha256(lock: str | os.PathLike, url: str, sha256: str, *, name: str = "", path: Path | None = None,
                  replace: bool = False) -> None:
    """Write ``url: sha256`` into ``lock`` (atomically, under a lock on its folder); a different hash already
    recorded there (another job's fetch) is refused with ``mismatch_error``, unless ``replace`` (the stand-in hub's
    own lock, rebuilt)."""
    lock = Path(lock)
    with _locked(lock.parent):
        pins = read_lock(lock)
        if url in pins and not replace:
            if pins[url] != sha256:
                raise mismatch_error(name=name or url, url=url, expected=pins[url], actual=sha256, where=str(lock),
                                     path=path or cache_path(url))
            return
        pins[url] = sha256
        fd, tmp = tempfile.mkstemp(prefix=f".{lock.name}.", suffix=".tmp", dir=lock.parent)
        with os.fdopen(fd, "w") as f:
            f.write(LOCK_HEADER + yaml.safe_dump(dict(sorted(pins.items())), sort_keys=False, width=1000))
        os.chmod(tmp, 0o644)
        os.replace(tmp, lock)


def expected_sha256(spec: dict) -> tuple[str | None, str]:
    """(pinned SHA-256 or None, where it is pinned): the declaration's ``sha256``, else the lock's entry."""
    if spec.get("sha256"):
        return str(spec["sha256"]).lower(), spec.get("sha256_in") or "its declaration"
    return read_lock(spec["lock"]).get(spec["url"]), str(spec["lock"])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _unavailable(name: str, url: str, path: Path, why: str) -> ModelNotAvailableError:
    return ModelNotAvailableError(
        f"checkpoint {name} ({url}) is not in the checkpoint cache ({path}) and cannot be fetched ({why}). On a "
        f"machine with network, with the same {CACHE_ENV} or HF_HOME: `prh pin-checkpoints` (fetches every URL "
        f"checkpoint and records its SHA-256), or `curl -L -o {path} {url}`")


def _download(url: str, dest: Path, *, name: str, timeout: float) -> tuple[Path, str]:
    """Stream ``url`` into a temporary file beside ``dest``, hashing it; return (temporary path, SHA-256)."""
    from urllib.error import URLError
    from urllib.request import urlopen

    if urlparse(url).scheme != "file" and _offline():
        raise _unavailable(name, url, dest, "HF_HUB_OFFLINE is set")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urlopen(url, timeout=timeout) as response:  # noqa: S310 - declared URLs
            while block := response.read(CHUNK):
                digest.update(block)
                out.write(block)
    except (URLError, OSError) as e:
        Path(tmp).unlink(missing_ok=True)
        raise _unavailable(name, url, dest, f"{type(e).__name__}: {e}") from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), digest.hexdigest()


def fetch_checkpoint(spec: dict, *, timeout: float = 60.0) -> tuple[Path, str]:
    """(cached file, SHA-256) of a URL checkpoint ``spec`` (``prh.models.checkpoints.resolve_checkpoint``: name, url,
    lock, optional sha256), fetched when absent; its SHA-256 checked against the pin, or recorded as the pin."""
    name, url = spec.get("name") or spec["url"], spec["url"]
    path = cache_path(url)
    expected, where = expected_sha256(spec)
    if not path.is_file():
        with _locked(path.parent):  # the model's other jobs wait for this download instead of repeating it
            if not path.is_file():
                tmp, actual = _download(url, path, name=name, timeout=timeout)
                if expected is not None and actual != expected:
                    tmp.unlink(missing_ok=True)
                    raise mismatch_error(name=name, url=url, expected=expected, actual=actual, where=where,
                                         path=path)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
    actual = _sha256(path)
    if expected is None:
        record_sha256(spec["lock"], url, actual, name=name, path=path)  # pinned on first fetch
    elif actual != expected:
        raise mismatch_error(name=name, url=url, expected=expected, actual=actual, where=where, path=path)
    return path, actual
