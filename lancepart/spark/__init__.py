"""Spark adapter: executors evaluate partition transforms on Arrow batches; the driver plans
and commits through the engine-agnostic ``lancepart.write`` path."""
