"""What the operations below the public object need of a namespace: its ``__manifest``, the
snapshot it reads, the schema and partition specs of that snapshot, and a way to move to the
latest one. :class:`lancepart.namespace.PartitionedNamespace` is the implementation; the
modules under it (write, maintenance, index, read) name this protocol instead, so that
nothing under the public object depends on it.

>>> def partition_count(ns: NamespaceHandle, filter: str | None = None) -> int:
...     return len(ns.refresh().partitions(filter))
>>> partition_count(ns), partition_count(ns, "event_date > DATE '2025-12-09'")
(3, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from lancepart.model.spec import PartitionSpec
    from lancepart.results import PartitionInfo
    from lancepart.storage.manifest import Manifest, ManifestSnapshot


class NamespaceHandle(Protocol):
    """An open partitioned namespace as the operations see it (a snapshot of ``__manifest``)."""

    root: str
    storage_options: Mapping[str, str] | None

    @property
    def manifest(self) -> Manifest: ...

    @property
    def manifest_version(self) -> int: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def specs(self) -> dict[int, PartitionSpec]: ...

    @property
    def current_spec(self) -> PartitionSpec: ...

    def snapshot(self) -> ManifestSnapshot: ...

    def refresh(self) -> NamespaceHandle: ...

    def partitions(self, filter: str | None = None) -> list[PartitionInfo]: ...

    def _partition_infos(self, tables: pa.Table) -> list[PartitionInfo]: ...


#: How a module under the public object opens a handle by root (``open_handle(root, version=,
#: storage_options=)``): PartitionedNamespace.open, set when lancepart.namespace is imported
#: (importing any part of lancepart imports it). A pickled reader reopens its snapshot through it.
open_handle: Callable[..., Any] | None = None

