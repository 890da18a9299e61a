"""standbyc: compile standby specs into validated GitOps manifests."""

from __future__ import annotations

__version__ = "0.1.0"
