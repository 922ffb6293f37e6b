"""The engine-agnostic write path: plan -> reserve -> write fragments -> commit (docs/design.md §8)."""
