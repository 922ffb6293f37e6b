"""Keeping secrets out of what lancepart prints: URL userinfo and storage option values.

Every message lancepart shows (typed errors, the CLI's output and progress, the jobs' summaries
and failures, log lines through the CLI's handler) goes through :func:`redact`:

* the userinfo of a URL is replaced by ``***``: ``s3://AKIA..:secret@bucket/x`` ->
  ``s3://***@bucket/x``, also in the ``file:/user:pw@host`` form Lance prints;
* the value of every secret-looking storage option lancepart was given (a key naming a key,
  secret, token, password, credential, signature, SAS or session) is replaced by ``***``
  wherever it appears, for example in a Lance error that repeats the option;
* the value in Lance's ``failed to parse "<value>" as ...`` (any option) is replaced too.

>>> redact("cannot open s3://AKIAX:hunter22@bucket/events")
'cannot open s3://***@bucket/events'
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

MASK = "***"
# scheme, one to three slashes (Lance prints file:/...), userinfo up to the last @ before the host
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*:/{1,3})([^/\s?#'\"]+)@")
# Lance's "failed to parse "<value>" as boolean" repeats an option's value, whatever its key
_PARSED_VALUE = re.compile(r'(failed to parse )"[^"\n]*"')
_SECRET_KEY = re.compile(r"key|secret|token|passw|credential|signature|sas|session|auth", re.IGNORECASE)
_MIN_SECRET = 8  # shorter values would mask ordinary words in every message
_secrets: set[str] = set()
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it (the secrets stay known)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def is_secret_option(key: str) -> bool:
    """Whether a storage option's value is treated as a secret (never printed)."""
    return bool(_SECRET_KEY.search(key))


def register(storage_options: Mapping[str, Any] | None) -> None:
    """Remember the secret values of ``storage_options`` so that :func:`redact` masks them in
    any later message of this process (a Lance error text that repeats them, for instance)."""
    if not storage_options:
        return
    values = {str(v) for k, v in storage_options.items() if is_secret_option(str(k)) and len(str(v)) >= _MIN_SECRET}
    values |= {json.dumps(v)[1:-1] for v in values}  # as it appears inside JSON output
    if values - _secrets:
        with _lock:
            _secrets.update(values)


def redact(text: Any, storage_options: Mapping[str, Any] | None = None) -> str:
    """``text`` (any object, as ``str``) with URL userinfo and known secret values masked."""
    out = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", str(text))
    out = _PARSED_VALUE.sub(lambda m: m.group(1) + '"' + MASK + '"', out)
    register(storage_options)
    for value in sorted(_secrets, key=len, reverse=True):
        if value in out:
            out = out.replace(value, MASK)
    return out


def redact_obj(obj: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact_obj(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


class RedactingFilter:
    """A :mod:`logging` filter (for a handler) that redacts the formatted message of every record."""

    def filter(self, record) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return True
        record.msg, record.args = redact(message), None
        return True


class RedactingStream:
    """A text stream wrapper that redacts what is written (the CLI's stdout and stderr)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def redacting_output(func: F) -> F:
    """Run ``func`` with ``sys.stdout`` and ``sys.stderr`` redacted (the CLI's and the jobs'
    entry points: summaries, progress, log lines through a stream handler, tracebacks)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
        try:
            return func(*args, **kwargs)
        finally:
            sys.stdout, sys.stderr = out, err

    return wrapper  # type: ignore[return-value]
