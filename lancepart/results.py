"""Plain result records returned by the public API (docs/guide.md)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from lancepart.errors import without_source_locations


@dataclass(frozen=True)
class PartitionInfo:
    """One partition table as ``__manifest`` publishes it."""

    object_id: str
    location: str
    spec_id: int
    values: dict[str, Any]
    read_version: int | None
    read_branch: str | None = None
    read_tag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CommitResult:
    """What one publish did. ``skipped`` is True when ``batch_id`` was already committed;
    ``failures`` maps the object_id of each table a maintenance run had to leave out to why."""

    manifest_version: int
    rows_written: int = 0
    partitions_touched: int = 0
    partitions_created: int = 0
    retries: int = 0
    batch_id: str | None = None
    skipped: bool = False
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: what the result of ``ns.evolve`` still answers for its spec, with a DeprecationWarning (it
#: was the PartitionSpec itself before it became a CommitResult)
_SPEC_ATTRIBUTES = frozenset({"id", "fields", "key", "namespace", "field", "to_json", "to_json_string", "to_model",
                              "check_source_ids"})


@dataclass(frozen=True, eq=False)
class EvolveResult(CommitResult):
    """What :meth:`PartitionedNamespace.evolve` did: a :class:`CommitResult` whose ``spec`` is the
    partition spec new writes use (the new version, or the current one when the fields define
    exactly it and nothing was published). ``details``: ``spec_id``, ``created`` (a new spec
    version was published), ``previous_spec_id``, ``spec`` (its JSON).

    For one release it also answers what the :class:`PartitionSpec` it used to be answered
    (``result.id``, ``result.fields``, ``result.to_json()``, ``result == spec``), with a
    :class:`DeprecationWarning`: use ``result.spec``.
    """

    spec: Any = None  # PartitionSpec

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(replace(self, spec=None)), "spec": None if self.spec is None else self.spec.to_json()}

    def __getattr__(self, name: str) -> Any:
        spec = self.__dict__.get("spec")
        if name in _SPEC_ATTRIBUTES and spec is not None:
            warnings.warn(f"ns.update_spec() returns an EvolveResult (a CommitResult): use result.spec.{name} "
                          f"instead of result.{name}", DeprecationWarning, stacklevel=2)
            return getattr(spec, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __eq__(self, other: object) -> bool:
        from lancepart.model.spec import PartitionSpec

        if isinstance(other, PartitionSpec):
            warnings.warn("ns.update_spec() returns an EvolveResult (a CommitResult): compare result.spec with a "
                          "PartitionSpec", DeprecationWarning, stacklevel=2)
            return self.spec == other
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]  # like CommitResult: its details are a dict


@dataclass(frozen=True)
class CleanupStats:
    """What a cleanup removed (or would remove, in a dry run).

    ``versions_removed`` counts table and ``__manifest`` versions; ``files_removed`` every file
    deleted (version manifests, data, deletion, index and transaction files, the files of
    unreferenced directories) and ``bytes_removed`` their size; ``tables_scanned`` the partition
    tables examined. ``removed`` names what went: ``<location>@v<N>`` for a version,
    ``<location>/<path>`` for a file no version referenced, ``<directory>/`` for an unreferenced
    table directory. Every count is of what really went (a dry run: of what would go).
    ``skipped`` names what was to be examined or removed and was not (a ``<location>@v<N>`` or
    ``__manifest@v<N>`` that cannot be read or removed, a table, a file, a directory);
    ``errors`` says why, one message each (the rest went on). The CLI exits 3 when either is
    not empty.
    """

    versions_removed: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    tables_scanned: int = 0
    dry_run: bool = False
    manifest_versions_removed: int = 0
    orphan_files_removed: int = 0
    orphan_dirs_removed: int = 0
    removed: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()
    # how far back time travel reaches after this cleanup (a dry run: would reach): the oldest
    # __manifest version left and its commit time (ISO 8601 UTC); None if it could not be listed
    time_travel_from_version: int | None = None
    time_travel_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Problem:
    """One thing :meth:`PartitionedNamespace.verify` found wrong. ``kind`` is a short stable
    string (docs/verify-and-repair.md lists them): ``missing_column``, ``column_type``,
    ``namespace_unreadable``, ``table_unreadable``, ``missing_file``, ``schema_mismatch``,
    ``wrong_partition``, ``corrupt_data``."""

    object_id: str
    location: str | None
    kind: str
    message: str

    def __post_init__(self) -> None:  # messages often repeat a Lance error: without its Rust source locations
        object.__setattr__(self, "message", without_source_locations(self.message))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyReport:
    """What a verify run checked and found; ``ok`` when ``problems`` is empty.

    ``tables_checked`` counts the published tables examined, ``tables_declared`` the declared-only
    ones (no directory yet, ``read_version`` NULL: nothing to check), ``files_checked`` the files
    whose existence was checked and ``rows_checked`` the rows a deep run read and re-partitioned."""

    problems: tuple[Problem, ...] = ()
    deep: bool = False
    manifest_version: int | None = None
    tables_checked: int = 0
    tables_declared: int = 0
    files_checked: int = 0
    rows_checked: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}


def info_to_json(info: PartitionInfo, **extra: Any) -> dict[str, Any]:
    """What another process (a Spark executor) needs to open one partition table at its
    published version."""
    return {"object_id": info.object_id, "location": info.location, "spec_id": info.spec_id,
            "read_version": info.read_version, "read_branch": info.read_branch, "read_tag": info.read_tag, **extra}


def info_from_json(d: Mapping[str, Any]) -> PartitionInfo:
    return PartitionInfo(object_id=d["object_id"], location=d["location"], spec_id=d["spec_id"], values={},
                         read_version=d["read_version"], read_branch=d["read_branch"], read_tag=d["read_tag"])
