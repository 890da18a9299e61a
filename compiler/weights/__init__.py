"""Lossless, verified deltas between safetensors checkpoints (see docs/delta-format.md).

This package root stays free of heavy imports: the CLI parser reads constants from it.
"""

from __future__ import annotations

DEFAULT_CHUNK = 1 << 20  # bytes per hashed chunk
# Left out of a published model directory unless asked otherwise: a git clone's history
# (which holds the weights again) and huggingface_hub's download metadata, which changes
# on every download.
DEFAULT_EXCLUDES: tuple[str, ...] = (".git", ".cache/huggingface")
# The engine APIs a weight-sync Job can ask to load a new generation (sync/reload.py).
RELOAD_APIS: tuple[str, ...] = ("sglang", "vllm", "triton")
# A sync's budget (--deadline): two full copies of the generation at the rate it may take
# (the compiled Job: the tier's rate; a sync run by hand: the slowest it accepts) plus 5
# minutes.
BUDGET_COPIES = 2
BUDGET_SLACK = 300
