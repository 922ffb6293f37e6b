"""Operations on a whole namespace beside reading and writing: its history and time travel
over ``__manifest`` versions (history), the data-quality gate of the jobs (quality) and the
repair of a ``__manifest`` a foreign writer stripped of lancepart's columns (repair).
"""
