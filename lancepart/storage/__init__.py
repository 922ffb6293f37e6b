"""Storage: Lance tables on a local or object-store root and the namespace's ``__manifest``:
the Lance settings read at the first commit (lance_env), opening and committing tables
(lance_io, table_commit), the ``__manifest`` table itself (manifest) and the one place that
turns storage, Lance, Arrow and Spark errors into lancepart's typed errors (error_mapping).
"""
