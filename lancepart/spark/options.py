"""Options of the ``lancepart`` data source: the namespace root, the data source's own options
(every other option is a storage option for Lance) and opening the namespace they name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lancepart.errors import InvalidArgumentError, SnapshotExpiredError
from lancepart.storage.manifest import normalize_root

# options the data source reads itself, lower-cased (Spark's options are case-insensitive)
OPTIONS = ("path", "batch_id", "max_retries", "flush_rows", "max_rows_per_file", "write_threads", "version",
           "split_rows", "spec", "result_path", "replacewhere", "filter", "readchangefeed", "startingversion",
           "endingversion", "maxpartitionbytes", "opencostinbytes", "minpartitions", "versionasof", "timestampasof",
           "mergeschema", "partitionoverwritemode")
# options Spark itself passes along, never storage options
SPARK_OPTIONS = ("checkpointlocation", "paths")
#: what Spark adds to the options of a catalog table (CREATE TABLE ... USING lancepart)
CATALOG_KEYS = ("owner", "provider", "location", "is_managed_location", "external", "comment")
#: the explicit form of a storage option: ``storage.<key>`` passes ``<key>`` to Lance as it is
STORAGE_PREFIX = "storage."
#: object-store keys recognised as storage options without the prefix: these prefixes, and the
#: unprefixed names of Lance's object stores (docs/object-storage.md)
STORAGE_KEY_PREFIXES = ("aws_", "azure_", "google_", "gcs_", "s3_")
STORAGE_KEYS = frozenset({
    "access_key_id", "secret_access_key", "session_token", "token", "region", "default_region", "endpoint",
    "endpoint_url", "bucket", "virtual_hosted_style_request", "skip_signature", "unsigned_payload",
    "checksum_algorithm", "conditional_put", "copy_if_not_exists", "disable_tagging", "imdsv1_fallback",
    "metadata_endpoint", "request_payer", "allow_http", "allow_invalid_certificates", "connect_timeout", "timeout",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate", "proxy_excludes",
    "user_agent", "http1_only", "http2_only", "client_max_retries", "client_retry_timeout", "download_retry_count",
    "account_name", "account_key", "sas_key", "sas_token", "container_name", "use_emulator", "use_fabric_endpoint",
    "service_account", "service_account_key", "application_credentials", "expires_at_millis"})
#: options of Delta Lake's source and sink that lancepart has no equivalent of: what to use instead
REFUSED = {
    "startingtimestamp": "option('startingVersion', N) (a __manifest version; ns.history() gives each version's "
                         "timestamp)",
    "maxfilespertrigger": "no rate limit: each micro-batch reads the commits published since the last one",
    "maxbytespertrigger": "no rate limit: each micro-batch reads the commits published since the last one",
    "skipchangecommits": "the change feed (readChangeFeed) reads deletes and updates as rows; the streaming source "
                         "without it reads inserts only",
    "ignoredeletes": "the streaming source without readChangeFeed reads inserts only; deletes never fail it",
    "ignorechanges": "the streaming source without readChangeFeed reads inserts only; updates never fail it",
    "overwriteschema": "ns.update_schema(...) (add, rename, drop, widen) before the write, or option('mergeSchema', "
                       "'true') to add and widen columns",
    "partitionby": "the namespace's partition spec (option 'spec' when creating it; ns.update_spec to change it)",
    "__partition_columns": "the namespace's partition spec, not partitionBy (option 'spec' when creating it; "
                           "ns.update_spec to change it)",
    "optimizewrite": "lancepart writes one fragment set per partition table per task; compact with ns.compact()",
    "datachange": "every lancepart write publishes its rows",
    "txnappid": "option('batch_id', ...) (exactly-once batch ids, docs/exactly-once.md)",
    "txnversion": "option('batch_id', ...) (exactly-once batch ids, docs/exactly-once.md)",
}


# --------------------------------------------------------------------------- options
def _root(options: Mapping[str, str]) -> str:
    root = options.get("path")
    if not root:
        raise InvalidArgumentError(f"option 'path' is missing: give the namespace root to load(root) / save(root) / "
                                   f"start(root) (options given: {sorted(options)}). A catalog table (CREATE TABLE "
                                   f"... USING lancepart) gets no options from Spark: use a temporary view, CREATE "
                                   f"TEMPORARY VIEW v USING lancepart OPTIONS (path '<root>') (docs/datasource.md)")
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


def is_storage_option(key: str) -> bool:
    """True for a storage option: ``storage.<key>``, or an object-store key Lance knows.

    >>> is_storage_option("aws_region"), is_storage_option("storage.anything"), is_storage_option("versionAsOff")
    (True, True, False)
    """
    k = key.lower()
    return k.startswith(STORAGE_PREFIX) or k.startswith(STORAGE_KEY_PREFIXES) or k in STORAGE_KEYS


def check_options(options: Mapping[str, str]) -> None:
    """Refuse every option that is neither the data source's own, nor Spark's, nor a storage
    option (:func:`is_storage_option`), with a typed error naming it and what to use: a typo
    never reads the latest snapshot silently.

    >>> check_options({"path": "/r", "versionAsOf": "3", "aws_region": "eu-west-1"})
    """
    import difflib

    if any(k.lower() == "owner" for k in options):  # Spark's catalog: CREATE TABLE ... USING lancepart
        raise InvalidArgumentError("CREATE TABLE ... USING lancepart is not supported: Spark 4.3 gives a catalog "
                                   "table's Python reader and writer no options (not even its path), so every read "
                                   "or INSERT of it would fail. Use a temporary view: CREATE TEMPORARY VIEW v USING "
                                   "lancepart OPTIONS (path '<root>') (docs/datasource.md)")
    for key in options:
        k = key.lower()
        if k in OPTIONS or k in SPARK_OPTIONS or is_storage_option(k):
            continue
        if k in REFUSED:
            raise InvalidArgumentError(f"option {key!r} is not supported by the lancepart data source: {REFUSED[k]}")
        close = difflib.get_close_matches(k, OPTIONS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidArgumentError(f"unknown option {key!r} of the lancepart data source: {hint}its options are "
                                   f"{', '.join(OPTIONS)} (case-insensitive); a storage option is an object-store "
                                   f"key (aws_*, azure_*, google_*, region, endpoint, ...) or "
                                   f"'{STORAGE_PREFIX}<key>' (docs/datasource.md)")


def storage_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """The storage options of the namespace among ``options`` (``storage.<key>`` as ``<key>``)."""
    so = {(k[len(STORAGE_PREFIX):] if k.lower().startswith(STORAGE_PREFIX) else k): v
          for k, v in options.items() if is_storage_option(k)}
    return so or None


def option(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` whatever the case of its key (None if absent)."""
    name = name.lower()
    return next((v for k, v in options.items() if k.lower() == name), None)


def flag(options: Mapping[str, str], name: str) -> bool:
    """A boolean option: ``true`` / ``false`` (any case), absent = false."""
    raw = option(options, name)
    if raw is None:
        return False
    v = str(raw).strip().lower()
    if v not in ("true", "false"):
        raise InvalidArgumentError(f"option {name!r} must be 'true' or 'false', got {raw!r}")
    return v == "true"


def _time_travel(options: Mapping[str, str]) -> tuple[int | None, Any]:
    """The ``__manifest`` version (option ``version`` or Delta's ``versionAsOf``) or the instant
    (``timestampAsOf``; an ISO date or timestamp, UTC unless it names a zone) a read names."""
    import datetime as dt

    named = {n: option(options, n) for n in ("version", "versionAsOf", "timestampAsOf")}
    given = [n for n, v in named.items() if v is not None]
    if len(given) > 1:
        raise InvalidArgumentError(f"options {given} each name a version to read: give one")
    if named["timestampAsOf"] is not None:
        raw = str(named["timestampAsOf"]).strip()
        try:
            when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(f"option 'timestampAsOf' must be an ISO date or timestamp such as "
                                       f"'2025-12-10' or '2025-12-10 08:00:00', got {raw!r}") from None
        return None, when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    name = "versionAsOf" if named["versionAsOf"] is not None else "version"
    return _int_option({name: named[name]}, name, None, 1), None


def _open(options: Mapping[str, str], load_version: int | None = None):
    """The namespace the options name, at option ``version`` if given, else at ``load_version``
    (the latest version when the data source was created, :func:`_latest_version`), else at the
    latest version."""
    from lancepart.namespace import PartitionedNamespace

    version, as_of = _time_travel(options)
    root, so = _root(options), storage_options(options)
    if version is None and as_of is None and load_version is not None:
        try:
            return PartitionedNamespace.open(root, storage_options=so, version=load_version)
        except SnapshotExpiredError as e:
            raise SnapshotExpiredError(f"__manifest version {load_version}, the latest one when this DataFrame or "
                                       f"view was loaded, is gone; load it again to read the latest version: "
                                       f"{e}") from None
    try:  # a version: a read-only handle on that __manifest snapshot (time travel, docs/history.md)
        return PartitionedNamespace.open(root, storage_options=so, version=version, as_of=as_of)
    except (SnapshotExpiredError, InvalidArgumentError) as e:
        what = f"'timestampAsOf'={as_of.isoformat()}" if as_of is not None else f"'version'={version}"
        raise type(e)(f"option {what}: {e}") from None


def _latest_version(options: Mapping[str, str]) -> int | None:
    """The latest ``__manifest`` version of the namespace the options name; None without a
    ``path`` (a catalog table), with option ``version`` (it names the version) or when there is
    no namespace yet (a write creating it; a read says so when Spark asks for the schema)."""
    from lancepart.errors import NamespaceNotFoundError
    from lancepart.storage.manifest import Manifest

    if not options.get("path") or any(option(options, n) is not None
                                       for n in ("version", "versionAsOf", "timestampAsOf")):
        return None
    try:
        return Manifest(normalize_root(_root(options)), storage_options(options)).latest_version()
    except NamespaceNotFoundError:
        return None
