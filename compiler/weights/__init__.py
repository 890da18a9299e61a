"""Lossless, verified deltas between safetensors checkpoints (see docs/delta-format.md).

This package root stays free of heavy imports: the CLI parser reads constants from it.
"""

from __future__ import annotations

DEFAULT_CHUNK = 1 << 20  # bytes per hashed chunk
