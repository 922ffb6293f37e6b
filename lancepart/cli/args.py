"""The ``lancepart`` command's shared pieces: argument types, storage options and the namespace
a command names (ROOT or a job config), progress on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from lancepart.errors import LancepartError
from lancepart.util import durations

if TYPE_CHECKING:
    from lancepart.namespace import PartitionedNamespace

STORAGE_OPTIONS_ENV = "LANCEPART_STORAGE_OPTIONS"


class UsageError(Exception):
    """A command line that parses but cannot be run as given (exit code 64)."""


# --------------------------------------------------------------------------- argument types
def parse_duration(text: str) -> timedelta:
    """``7d``, ``36h``, ``90m``, ``45s``, ``2w``, ``1d12h`` or ``0`` -> timedelta (an argparse type).

    >>> parse_duration("1d12h")
    datetime.timedelta(days=1, seconds=43200)
    """
    try:
        return durations.parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str, least: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {least}")
    return value


def _non_negative_int(text: str) -> int:
    return _positive_int(text, least=0)


# --------------------------------------------------------------------------- shared helpers
def storage_options(args: argparse.Namespace, from_config: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """``$LANCEPART_STORAGE_OPTIONS`` (a JSON object), then ``--storage-options-file`` (a JSON or
    YAML mapping), then the config's ``namespace.storage``, then each ``--storage-option
    KEY=VALUE``; later ones win. ``${VAR}`` in a file value is the environment variable VAR.
    Values are never echoed: the env variable and the file keep secrets out of ``ps``."""
    from lancepart.config import storage_options_from_env, storage_options_from_file
    from lancepart.redact import register

    try:
        merged: dict[str, str] = storage_options_from_env()
    except LancepartError as e:
        raise UsageError(str(e)) from None
    path = getattr(args, "storage_options_file_sub", None) or getattr(args, "storage_options_file", None)
    if path:
        merged.update(storage_options_from_file(path))
    merged.update(from_config or {})
    for item in args.storage_option or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError("--storage-option needs KEY=VALUE (the value is not shown here)")
        merged[key.strip()] = value
    register(merged)
    return merged or None


def _read_config_namespace(path: str) -> tuple[str, dict[str, str]]:
    """``namespace.root`` and ``namespace.storage`` of a job config, checked in full (an unknown
    key such as ``storage_options:`` is an error, not credentials silently dropped)."""
    from lancepart.config import JobConfig

    nc = JobConfig.load(path, storage_env=False).namespace  # storage_options() adds the environment
    return nc.root, dict(nc.storage_options)


def _target(args: argparse.Namespace) -> tuple[str, dict[str, str] | None]:
    """The namespace root and storage options a command works on (ROOT or ``--config``)."""
    cfg_storage: dict[str, str] = {}
    root = getattr(args, "root", None)
    if args.config:
        cfg_root, cfg_storage = _read_config_namespace(args.config)
        root = root or cfg_root
    if not root:
        raise UsageError(f"{args.command}: give the namespace ROOT or --config FILE")
    return root, storage_options(args, cfg_storage)


def _open(args: argparse.Namespace) -> PartitionedNamespace:
    from lancepart.namespace import PartitionedNamespace

    root, so = _target(args)
    return PartitionedNamespace.open(root, storage_options=so)


class _Progress:
    """Progress lines on stderr (silenced by ``-q``)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"lancepart: [{time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)
