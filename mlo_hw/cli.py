"""What every command does with bad input: one line on stderr, exit status 2, nothing half written.

- :func:`command` wraps a ``main(argv) -> int``: a :class:`BadInput` (``ConfigError``, ``FrontendError``,
  :class:`UsageError`, argparse's own errors through :class:`ArgumentParser`) or an ``OSError`` becomes
  ``error: <one line naming the field, file or node>`` on stderr and status 2. Anything else is a bug
  and keeps its traceback.
- Argument types: :func:`positive_int`, :func:`folder` (an output folder: not a file, not under a file).
- :func:`staged_folder`: a build is written into a temporary folder beside its destination and renamed
  into place on success, replacing an earlier build only then; a failure leaves no trace.
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

__all__ = ["BadInput", "UsageError", "ArgumentParser", "command", "positive_int", "nonnegative_int", "folder", "staged_folder",
           "one_line", "EXIT_BAD_INPUT"]

EXIT_BAD_INPUT = 2


class BadInput(ValueError):
    """Input a command refuses; ``str(err)`` is one line naming the field, file or node."""


class UsageError(BadInput):
    """A bad command-line argument."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line) instead of printing the usage and exiting."""

    def error(self, message):
        raise UsageError(message)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def command(*extra: type[BaseException]):
    """Decorator for ``main(argv) -> int``: known errors (and ``extra`` ones) -> one line on stderr, exit 2."""
    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            try:
                return main(argv)
            except (BadInput, *extra) as e:
                msg = one_line(e)
            except OSError as e:
                msg = one_line(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
            print(f"error: {msg}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return run
    return wrap


def _int_from(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_from(text, 1, "positive")


def nonnegative_int(text: str) -> int:
    return _int_from(text, 0, "non-negative")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def folder(text: str) -> Path:
    """An output folder: a path that is a folder or can become one (checked again when written)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder path")
    p = Path(text)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise argparse.ArgumentTypeError(f"{q} is a file; expected a folder")
            break
    return p


@contextmanager
def staged_folder(out: Path, flag: str, marks: tuple[str, ...]):
    """Yield a new folder beside ``out`` to write a build into; on success it becomes ``out``.

    An existing ``out`` is replaced (as a whole) only when the build succeeded, and only when it is empty
    or holds an earlier build (one of the files ``marks``); anything else is refused, naming ``flag``.
    """
    final = Path(os.path.abspath(out))
    if final.parent == final:
        raise UsageError(f"{flag}: {out} cannot be a build folder")
    if final.exists():
        if not final.is_dir():
            raise UsageError(f"{flag}: {out} is a file; expected a folder")
        if any(final.iterdir()) and not any((final / m).exists() for m in marks):
            raise UsageError(f"{flag}: {out} is not empty and holds no earlier build (no {marks[0]}); "
                             "give a new or empty folder")
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    tmp, old = (final.with_name(f".{final.name}.{what}-{tag}") for what in ("partial", "old"))
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:
        raise UsageError(f"{flag}: cannot create a folder in {final.parent} ({e.strerror})") from None
    try:
        yield tmp
        if final.exists():
            final.rename(old)
        try:
            tmp.rename(final)
        except OSError:
            if old.exists():
                old.rename(final)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)      # already renamed after a success
    shutil.rmtree(old, ignore_errors=True)
