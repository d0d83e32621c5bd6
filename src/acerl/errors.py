"""The failures a person can act on, and the exit status of each (the ``acerl`` CLI's error policy).

An expected failure -- a config key, a missing input, a malformed data row or result file, an unusable
checkpoint, an unreachable hub -- raises a :class:`UserError` whose message names the file / key / row and
the fix. The CLI prints it as one line, ``acerl <command>: <kind>: <message>``, and exits with the class's
:attr:`~UserError.exit_code` (``--verbose`` adds the traceback). Any other exception is a bug and keeps its
traceback (exit 1).

Exit statuses of every ``acerl`` command (also in the README):

====  =============================================================================================
0     success
1     unexpected error (a bug: the traceback is printed)
2     command-line usage or config error (:class:`ConfigError <acerl.config.ConfigError>`)
3     an input is missing: run the stage that makes it first (:class:`MissingInputError`)
4     an input is unusable: a malformed data row or result file, a bad checkpoint, an unreachable hub
      (:class:`BadInputError`, :class:`SourceUnavailableError`); a file or folder this user may not write or
      read (:class:`AccessDeniedError`)
75    training checkpointed and stopped on SIGTERM / SIGUSR1, or another process holds the run's lock; rerun
      the same command to resume
130   interrupted (Ctrl-C)
141   stdout closed early (``acerl config runs | head``), as a Unix tool killed by SIGPIPE
====  =============================================================================================
"""

from __future__ import annotations

import os
import pickle
import shlex
import stat
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

EXIT_OK = 0
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UserError(Exception):
    """An expected failure; the message names the file / key / row and what to do about it."""

    exit_code: int = 1
    kind: str = "error"


class ConfigError(UserError, ValueError):
    """A config file is invalid; the message names the file and the key path (re-exported as
    :class:`acerl.config.ConfigError`)."""

    exit_code = 2
    kind = "config error"


class MissingInputError(UserError, FileNotFoundError):
    """A file or folder a stage reads is absent (an earlier stage has not run)."""

    exit_code = 3
    kind = "missing input"


class BadInputError(UserError, ValueError):
    """An input exists but cannot be used: a malformed row or result file, an incompatible checkpoint."""

    exit_code = 4
    kind = "bad input"


class SourceUnavailableError(UserError, OSError):
    """A remote source (the Hugging Face hub) cannot be reached and nothing local stands in for it."""

    exit_code = 4
    kind = "source unavailable"


class AccessDeniedError(UserError, PermissionError):
    """The operating system refused this user a file or folder (:func:`access_denied`)."""

    exit_code = 4
    kind = "permission denied"


def access_denied(err: PermissionError) -> AccessDeniedError:
    """``err`` as one line naming the path, the folder or file that refused it, its permission bits and owner,
    and the fix: a file written inside a folder this user may not write is refused by the folder."""
    target = Path(err.filename) if err.filename else None
    if target is None:
        return AccessDeniedError(
            f"{err.strerror or err}; check the permissions of the work directory (--root)"
        )
    refusing = target
    while not refusing.exists() and refusing != refusing.parent:
        refusing = refusing.parent
    try:
        info = refusing.stat()
        mode = f"{stat.filemode(info.st_mode)} (owner uid {info.st_uid}, group gid {info.st_gid})"
    except OSError:
        mode = "unknown permissions"
    can_write = os.access(refusing, os.W_OK)
    what = "write" if not can_write else "read"
    where = "" if refusing == target else f" inside {refusing}"
    denied = AccessDeniedError(
        f"{target}: permission denied: this user (uid {os.getuid()}) may not {what} it{where}, which is {mode}; "
        "give this user that permission, or use another --root"
    )
    denied.__cause__ = err
    return denied


UNREADABLE: tuple[type[BaseException], ...] = (
    OSError,  # includes gzip.BadGzipFile and a truncated read
    EOFError,  # a truncated gzip stream
    ValueError,  # json, pyarrow.ArrowInvalid, a malformed header
    RuntimeError,  # torch.load of a truncated zip archive
    zlib.error,
    pickle.UnpicklingError,
)
"""What decoding a truncated or corrupt file raises (a library's own error class is added by the caller)."""


@contextmanager
def reading(
    path: Path | str,
    remake: str,
    errors: tuple[type[BaseException], ...] = (),
    delete: Path | str | None = None,
) -> Iterator[None]:
    """Decode ``path`` inside this block: a truncated or corrupt file (any of :data:`UNREADABLE` and ``errors``)
    becomes a :class:`BadInputError` naming the file, what was wrong and the fix -- delete it (or the folder
    ``delete`` it belongs to) and ``remake`` (e.g. ``"rerun `acerl sample ...`"``). A :class:`UserError` raised
    inside passes unchanged.

    Keep the block to the decoding itself, so that a bug in the code around it keeps its traceback."""
    try:
        yield
    except UserError:
        raise
    except (*UNREADABLE, *errors) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise BadInputError(
            f"{path} is unreadable (truncated or corrupt: {reason[:200]}); "
            f"delete {'it' if delete is None else delete} and {remake}"
        ) from e


_INVOCATION_OPTIONS: ContextVar[tuple[str, ...]] = ContextVar("acerl_invocation_options", default=())


@contextmanager
def invocation_options(options: Sequence[str]) -> Iterator[None]:
    """Inside this block :func:`fix_command` repeats ``options``: the ``--config``/``--set``/``--root`` of the
    ``acerl`` command being run (set by the CLI), so a printed fix reads and writes the same files."""
    token = _INVOCATION_OPTIONS.set(tuple(options))
    try:
        yield
    finally:
        _INVOCATION_OPTIONS.reset(token)


def fix_command(subcommand: str, *args: str) -> str:
    """```acerl <subcommand> <args> <the invocation's options>```: a command to print in an error message, in
    backticks and shell-quoted, as the user would type it again (``fix_command("prepare-base", "--model",
    "tiny")`` -> ```acerl prepare-base --model tiny --config my.yaml --root work```)."""
    return "`" + shlex.join(["acerl", subcommand, *args, *_INVOCATION_OPTIONS.get()]) + "`"
