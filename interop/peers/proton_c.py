"""Proton's C and C++ examples (Debian ``libqpid-proton11-dev-examples``), compiled.

The sources are installed under ``/usr/share/proton/examples/c`` (older layouts:
``/usr/share/doc/libqpid-proton*-dev-examples/examples/c``); we build ``send``,
``receive``, ``send-ssl`` and ``send-abort`` (clients of the matrix) and
``broker`` (Proton's C example broker, for the benchmarks) into
``interop/.build/proton-c/`` against ``libqpid-proton11-dev``, which is ignored
by git. The C++ ones that talk to a broker are built with g++ against
``libqpid-proton-cpp12-dev`` into ``interop/.build/proton-cpp/`` (once; a
binary is rebuilt only when its source is newer).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .base import PeerUnavailable, apt_install

__all__ = [
    "BUILD_DIR",
    "CPP_EXAMPLES",
    "EXAMPLES",
    "PACKAGES",
    "build_cpp_examples",
    "build_examples",
    "examples_source",
]

BUILD_DIR = Path(__file__).resolve().parents[1] / ".build" / "proton-c"
EXAMPLES = ("send", "receive", "send-ssl", "send-abort", "broker")
PACKAGES = (
    "libqpid-proton11-dev",
    "libqpid-proton11-dev-examples",
    "gcc",
    "pkg-config",
    "libc6-dev",
)
CPP_BUILD_DIR = BUILD_DIR.parent / "proton-cpp"
# the C++ examples that talk to a broker (the "direct" ones and service_bus do not)
CPP_EXAMPLES = (
    "simple_send",
    "simple_recv",
    "simple_connect",
    "helloworld",
    "client",
    "server",
    "queue_browser",
    "colour_send",
    "selected_recv",
    "multithreaded_client",
    "multithreaded_client_flow_control",
    "reconnect_client",
)
CPP_PACKAGES = ("libqpid-proton-cpp12-dev", "libqpid-proton11-dev-examples", "g++", "pkg-config")
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


def _flags(package: str) -> list[str]:
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", package],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        out = ["-lqpid-proton-cpp" if package.endswith("-cpp") else "-lqpid-proton"]
    return out


def _compile(
    compiler: str, src: Path, names: tuple[str, ...], suffix: str, package: str, build_dir: Path
) -> dict[str, Path]:
    """Compile ``src/NAME.SUFFIX`` into ``build_dir/NAME`` unless the binary is newer."""
    build_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in names:
        source = src / f"{name}{suffix}"
        binary = build_dir / name
        if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
            r = subprocess.run(
                [compiler, "-O2", "-o", str(binary), str(source), *_flags(package), "-lpthread"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                raise PeerUnavailable(f"{compiler} could not build {name}{suffix}: {last}")
        out[name] = binary
    return out


def _check(install: bool, packages: tuple[str, ...], header: Path, compiler: str) -> Path:
    """The examples' source directory (apt-getting ``packages`` first if asked and needed)."""
    sources = examples_source()
    if install and (sources is None or not header.exists() or shutil.which(compiler) is None):
        apt_install(*packages)
        sources = examples_source()
    if sources is None:
        raise PeerUnavailable(
            "Proton's example sources are not installed (apt-get install libqpid-proton11-dev-examples)"
        )
    if shutil.which(compiler) is None:
        raise PeerUnavailable(f"{compiler} is not installed")
    if not header.exists():
        raise PeerUnavailable(f"{header} is missing (apt-get install {packages[0]})")
    return sources


def build_examples(install: bool = False, build_dir: Path = BUILD_DIR) -> dict[str, Path]:
    """Compile the C examples (once; rebuilt when a source is newer); return name -> binary.

    Raises PeerUnavailable with the reason when the sources, headers or gcc are missing.
    """
    src = _check(install, PACKAGES, Path("/usr/include/proton/proactor.h"), "gcc")
    return _compile("gcc", src, EXAMPLES, ".c", "libqpid-proton", build_dir)


def build_cpp_examples(install: bool = False, build_dir: Path = CPP_BUILD_DIR) -> dict[str, Path]:
    """Compile the C++ examples (once; rebuilt when a source is newer); return name -> binary."""
    header = Path("/usr/include/proton/container.hpp")
    src = _check(install, CPP_PACKAGES, header, "g++").parent / "cpp"
    return _compile("g++", src, CPP_EXAMPLES, ".cpp", "libqpid-proton-cpp", build_dir)


def main(argv: list[str] | None = None) -> int:
    """``python -m interop.peers.proton_c [--install]``: build the examples, print their paths."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m interop.peers.proton_c", description=main.__doc__)
    p.add_argument(
        "--install", action="store_true", help="apt-get install the packages first if needed"
    )
    p.add_argument("--cpp", action="store_true", help="the C++ examples too")
    args = p.parse_args(argv)
    try:
        built = build_examples(install=args.install)
        if args.cpp:
            built.update({f"cpp/{k}": v for k, v in build_cpp_examples(args.install).items()})
    except PeerUnavailable as exc:
        print(f"cannot build Proton's C examples: {exc}", file=sys.stderr)
        return 1
    for name, path in built.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
