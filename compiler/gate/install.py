"""Install the validators (and, for the tests, the servers) from their pins.

``standbyc tools install`` works from a wheel: it needs only Go. Each tool is built with
``go install MODULE/PKG@VERSION``; the Go module proxy refuses that for some modules (it
serves the pinned version but not the module's version list, which ``go install`` reads
to check for deprecation), and then the pinned zip is fetched with ``go mod download``,
its sum checked against the pin, and the package built inside it. A stamp next to each
binary records the pin it was built from, so a second run builds nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from compiler.errors import ToolFailed, ToolMissing
from compiler.gate import wrapper
from compiler.gate.pins import Pins, ToolPin

GO_HINT = (
    "Go >= 1.24 is needed to build them (https://go.dev/dl, or apt-get install golang-go); "
    "or validate elsewhere and compile with --no-validate"
)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolMissing(f"go is not installed: {GO_HINT}")
    return go


def _run(
    argv: list[str], *, cwd: Path | None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _stamp(dest: Path, pin: ToolPin) -> Path:
    return dest / f".{pin.name}.pin"


def build(pin: ToolPin, dest: Path, log: Callable[[str], None]) -> bool:
    """Build one tool into ``dest``; False when it was already there from the same pin."""
    stamp = _stamp(dest, pin)
    if (dest / pin.name).is_file() and stamp.is_file() and stamp.read_text().strip() == pin.stamp:
        return False
    go = _go()
    if pin.wrapped:
        log(f"go build {pin.path}@{pin.version} through a wrapper module")
        wrapper.build(pin, dest, go, dict(os.environ))
        stamp.write_text(pin.stamp + "\n")
        return True
    env = {**os.environ, "GOBIN": str(dest), "GOFLAGS": "-mod=mod"}
    flags = ["-ldflags", pin.go_ldflags()]
    log(f"go install {pin.path}@{pin.version}")
    first = _run([go, "install", *flags, f"{pin.path}@{pin.version}"], cwd=None, env=env)
    if first.returncode != 0:
        log(f"go install refused ({first.stderr.strip().splitlines()[-1:]}); building from "
            f"go mod download {pin.stamp} instead")  # fmt: skip
        info = _run([go, "mod", "download", "-json", pin.stamp], cwd=None, env=env)
        if info.returncode != 0:
            raise ToolFailed(f"go mod download {pin.stamp} failed:\n{info.stderr}{info.stdout}")
        meta = json.loads(info.stdout)
        if meta.get("Sum") != pin.sum:
            raise ToolFailed(f"{pin.stamp} has sum {meta.get('Sum')}; the pin says {pin.sum}")
        second = _run([go, "install", *flags, pin.package], cwd=Path(meta["Dir"]), env=env)
        if second.returncode != 0:
            raise ToolFailed(
                f"building {pin.name} failed:\n{first.stderr}\n{second.stderr}{second.stdout}"
            )
    stamp.write_text(pin.stamp + "\n")
    return True


def download_crd_modules(pins: Pins, log: Callable[[str], None], *, tests: bool = False) -> None:
    """Put the CRD source modules in Go's module cache, so schemas build offline later
    (with ``tests``, the ones only the tests read too)."""
    go = _go()
    for crd in [*pins.crds, *(pins.test_crds.values() if tests else ())]:
        if crd.module is None:
            continue
        log(f"go mod download {crd.module}@{crd.version}")
        result = _run([go, "mod", "download", "-json", f"{crd.module}@{crd.version}"],
                      cwd=None, env=dict(os.environ))  # fmt: skip
        if result.returncode != 0:
            raise ToolFailed(f"go mod download {crd.module}@{crd.version} failed:\n{result.stderr}")


def install(pins: Pins, names: Iterable[str], dest: Path, log: Callable[[str], None]) -> list[str]:
    """Build the named tools (from ``pins.tools`` and ``pins.test_tools``) into ``dest``."""
    dest = dest.resolve()  # GOBIN must be absolute
    dest.mkdir(parents=True, exist_ok=True)
    every = {**pins.tools, **pins.test_tools}
    built: list[str] = []
    for name in names:
        if build(every[name], dest, log):
            built.append(name)
        else:
            log(f"{name} {every[name].version} already installed")
    return built
