"""Helpers with no knowledge of namespaces: durations as people write them (durations), the
bounded thread pool of per-table Lance calls (parallel), fault injection at named protocol steps
for the crash tests (faults) and seeded sample data (sample).
"""
