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
      (:class:`BadInputError`, :class:`SourceUnavailableError`)
75    training checkpointed and stopped on SIGTERM / SIGUSR1; rerun the same command to resume
130   interrupted (Ctrl-C)
141   stdout closed early (``acerl config runs | head``), as a Unix tool killed by SIGPIPE
====  =============================================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class UserError(Exception):
    """An expected failure; the message names the file / key / row and what to do about it."""

    exit_code: int = 1
    kind: str = "error"


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
