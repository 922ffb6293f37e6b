"""The engine-agnostic write path: plan -> reserve -> write fragments -> commit (docs/decisions.md §8)."""
