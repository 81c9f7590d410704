"""Proton's C examples (Debian ``libqpid-proton11-dev-examples``), compiled with gcc.

The sources are installed under ``/usr/share/proton/examples/c`` (older layouts:
``/usr/share/doc/libqpid-proton*-dev-examples/examples/c``); we build ``send``,
``receive``, ``send-ssl`` and ``send-abort`` (clients of the matrix) and
``broker`` (Proton's C example broker, for the benchmarks) into
``interop/.build/proton-c/`` against ``libqpid-proton11-dev``, which is ignored
by git.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .base import PeerUnavailable, apt_install

__all__ = ["BUILD_DIR", "EXAMPLES", "PACKAGES", "build_examples", "examples_source"]

BUILD_DIR = Path(__file__).resolve().parents[1] / ".build" / "proton-c"
EXAMPLES = ("send", "receive", "send-ssl", "send-abort", "broker")
PACKAGES = (
    "libqpid-proton11-dev",
    "libqpid-proton11-dev-examples",
    "gcc",
    "pkg-config",
    "libc6-dev",
)
_SOURCE_DIRS = (
    Path("/usr/share/proton/examples/c"),
    Path("/usr/share/doc/libqpid-proton11-dev-examples/examples/c"),
    Path("/usr/share/doc/libqpid-proton-dev-examples/examples/c"),
)


def examples_source() -> Path | None:
    for d in _SOURCE_DIRS:
        if (d / "send.c").exists():
            return d
    return None


def _flags() -> list[str]:
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libqpid-proton"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        out = ["-lqpid-proton"]
    return out


def build_examples(install: bool = False, build_dir: Path = BUILD_DIR) -> dict[str, Path]:
    """Compile the examples (once; rebuilt when a source is newer); return name -> binary.

    Raises PeerUnavailable with the reason when the sources, headers or gcc are missing.
    """
    headers = Path("/usr/include/proton/proactor.h")
    if install and (
        examples_source() is None or not headers.exists() or shutil.which("gcc") is None
    ):
        apt_install(*PACKAGES)
    src = examples_source()
    if src is None:
        raise PeerUnavailable(
            "Proton's C example sources are not installed (apt-get install libqpid-proton11-dev-examples)"
        )
    if shutil.which("gcc") is None:
        raise PeerUnavailable("gcc is not installed")
    if not headers.exists():
        raise PeerUnavailable(
            "Proton's C headers are not installed (apt-get install libqpid-proton11-dev)"
        )
    build_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in EXAMPLES:
        source = src / f"{name}.c"
        binary = build_dir / name
        if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
            r = subprocess.run(
                ["gcc", "-O2", "-o", str(binary), str(source), *_flags(), "-lpthread"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                raise PeerUnavailable(f"gcc could not build {name}.c: {last}")
        out[name] = binary
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m interop.peers.proton_c [--install]``: build the examples, print their paths."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m interop.peers.proton_c", description=main.__doc__)
    p.add_argument(
        "--install", action="store_true", help="apt-get install the packages first if needed"
    )
    args = p.parse_args(argv)
    try:
        built = build_examples(install=args.install)
    except PeerUnavailable as exc:
        print(f"cannot build Proton's C examples: {exc}", file=sys.stderr)
        return 1
    for name, path in built.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
