"""Options of the ``lancepart`` data source: the namespace root, the data source's own options
(every other option is a storage option for Lance) and opening the namespace they name."""

from __future__ import annotations

from collections.abc import Mapping

from lancepart.errors import InvalidArgumentError, SnapshotExpiredError
from lancepart.storage.manifest import normalize_root

# options the data source reads itself; every other one is a storage option (Spark lower-cases keys)
OPTIONS = ("path", "batch_id", "max_retries", "flush_rows", "max_rows_per_file", "version", "split_rows", "spec",
           "result_path", "replacewhere", "filter", "readchangefeed", "startingversion", "endingversion",
           "maxpartitionbytes", "opencostinbytes", "minpartitions")
# options Spark itself passes along, never storage options
SPARK_OPTIONS = ("checkpointlocation", "paths")


# --------------------------------------------------------------------------- options
def _root(options: Mapping[str, str]) -> str:
    root = options.get("path")
    if not root:
        raise InvalidArgumentError(f"option 'path' is missing: give the namespace root to load(root) / save(root) / "
                                   f"start(root) (options given: {sorted(options)})")
    if root.startswith("file:") and not root.startswith("file://"):  # Hadoop's form (CREATE TABLE ... LOCATION)
        root = "/" + root[len("file:"):].lstrip("/")
    return root


def _int_option(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name!r} must be an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name!r} must be an integer >= {minimum}, got {raw!r}")
    return value


def storage_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """The options that are not the data source's own: the storage options of the namespace."""
    so = {k: v for k, v in options.items() if k.lower() not in OPTIONS and k.lower() not in SPARK_OPTIONS}
    return so or None


def _open(options: Mapping[str, str], load_version: int | None = None):
    """The namespace the options name, at option ``version`` if given, else at ``load_version``
    (the latest version when the data source was created, :func:`_latest_version`), else at the
    latest version."""
    from lancepart.namespace import PartitionedNamespace

    version = _int_option(options, "version", None, 1)
    root, so = _root(options), storage_options(options)
    if version is None and load_version is not None:
        try:
            return PartitionedNamespace.open(root, storage_options=so, version=load_version)
        except SnapshotExpiredError as e:
            raise SnapshotExpiredError(f"__manifest version {load_version}, the latest one when this DataFrame or "
                                       f"view was loaded, is gone; load it again to read the latest version: "
                                       f"{e}") from None
    try:  # a version: a read-only handle on that __manifest snapshot (time travel, docs/history.md)
        return PartitionedNamespace.open(root, storage_options=so, version=version)
    except (SnapshotExpiredError, InvalidArgumentError) as e:
        raise type(e)(f"option 'version'={version}: {e}") from None


def _latest_version(options: Mapping[str, str]) -> int | None:
    """The latest ``__manifest`` version of the namespace the options name; None without a
    ``path`` (a catalog table), with option ``version`` (it names the version) or when there is
    no namespace yet (a write creating it; a read says so when Spark asks for the schema)."""
    from lancepart.errors import NamespaceNotFoundError
    from lancepart.storage.manifest import Manifest

    if not options.get("path") or options.get("version") is not None:
        return None
    try:
        return Manifest(normalize_root(_root(options)), storage_options(options)).latest_version()
    except NamespaceNotFoundError:
        return None
