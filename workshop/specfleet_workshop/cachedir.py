"""The per-user cache that outlives repositories and clusters: built binaries and images, real vLLM's venvs.

It lives outside the repository so a fresh clone, `git clean` or a second work tree reuses what took many
minutes to build or download. Here, below both, because the dev cluster and real vLLM share it. The
function takes the environment as a mapping so the rule can be tested without touching the real one.

Several processes fill it at once (a test run's workers, a demo beside a test run), so every entry is made
under an exclusive lock on a file beside it (`flock`: the kernel releases it when its holder dies, killed or
not) and built aside, then renamed into place, so an entry appears complete or not at all. A half-made
copy found by the holder of the lock was left by a run that died: nobody else can be building it.
"""

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

DEFAULT_WAIT = 3600.0
"""Seconds to wait for another process's build: a cold real-vLLM install or Kubernetes build takes minutes."""


class CacheWaitError(TimeoutError):
    """Another process held an entry's lock for longer than the caller would wait."""


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """$SPECFLEET_CACHE, else $XDG_CACHE_HOME/specfleet, else ~/.cache/specfleet."""
    env = os.environ if environ is None else environ
    if env.get("SPECFLEET_CACHE"):
        return Path(env["SPECFLEET_CACHE"]).expanduser()
    xdg_cache = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg_cache).expanduser() / "specfleet"


def _lock_holder(lock_file: Path) -> str:
    try:
        holder = lock_file.read_text().strip()
    except OSError:
        holder = ""
    return holder or "another process"


@contextmanager
def exclusively(
    lock_path: Path, what: str, log: Callable[[str], None] = print, wait: float = DEFAULT_WAIT
) -> Iterator[None]:
    """Hold the exclusive lock `lock_path` (made when missing) for the block. When another process holds it, say
    whom we wait for, then wait up to `wait` seconds and raise `CacheWaitError` naming `what` after that."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+") as lock_file:
        deadline = time.monotonic() + wait
        told = False
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    log(f"waiting for {what}: {_lock_holder(lock_path)} is making it (lock {lock_path})")
                    told = True
                if time.monotonic() >= deadline:
                    raise CacheWaitError(
                        f"waited {wait:.0f}s for {what}, still being made by {_lock_holder(lock_path)} "
                        f"(lock {lock_path})"
                    ) from None
                time.sleep(0.5)
        try:
            lock_file.seek(0)
            lock_file.truncate()
            lock_file.write(f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n")
            lock_file.flush()
            yield
        finally:
            lock_file.truncate(0)
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def fill_once(
    target: Path,
    build: Callable[[Path], object],
    what: str,
    log: Callable[[str], None] = print,
    complete: Callable[[Path], bool] = Path.exists,
    wait: float = DEFAULT_WAIT,
) -> Path:
    """Make the cache entry `target` unless it is `complete`: one process builds it under a lock while the others
    wait. `build` gets a staging path beside `target` (absent: build a file or a directory there), which is
    renamed to `target` once `build` returns; if it raises, the staging path is removed."""
    if complete(target):
        return target
    staging = target.with_name(f".{target.name}.building")
    with exclusively(target.with_name(f".{target.name}.lock"), what, log, wait):
        if complete(target):  # made by the process we waited for
            return target
        for leftover in (staging, target):
            if leftover.exists() or leftover.is_symlink():
                log(f"{what}: removing the half-made {leftover} an interrupted run left")
                _remove(leftover)
        try:
            build(staging)
            staging.rename(target)
        except BaseException:
            if staging.exists():
                _remove(staging)
            raise
    return target
