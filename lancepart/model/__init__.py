"""The partitioning model, pure computation over Arrow values with no storage: partition specs
(spec), their transforms (transforms, murmur3), partition ids (ids), merge-key equality (keys),
the DataFusion side of the spec (datafusion_udfs), and the pure half of partition pruning:
predicates over source columns (predicates), their projection onto partition columns
(projection) and the visitors over a spec that apply it (visitors); the query over
``__manifest`` that runs them is :mod:`lancepart.read.manifest_query`.
"""
