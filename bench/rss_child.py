"""Run ``standbyc`` and report this process's own peak RSS (VmHWM) on stderr.

``ru_maxrss`` of a child inherits the parent's peak across fork+exec, so the
benchmark reads VmHWM (reset by exec) from inside the measured process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.cli import main


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    print(f"VmHWM {peak_rss_kib()}", file=sys.stderr)
    raise SystemExit(code)
