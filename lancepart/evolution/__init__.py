"""Evolution of a namespace after its creation: its schema (schema_evolution: columns added,
renamed, widened, with stable field ids), its partition spec (spec_evolution: a new spec version
that new writes use), and the Lance file format version of the tables it creates from now on
(file_format).
"""
