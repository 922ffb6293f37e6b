"""The engine-agnostic write path: plan -> reserve -> write fragments -> commit (DESIGN-NOTES §8)."""
