"""rhea (the Node.js AMQP 1.0 library), installed from the npm registry by npm.

``npm install rhea@3`` goes into ``interop/.build/rhea/`` (ignored by git), once;
the scenario scripts in ``interop/rhea/`` run under ``node`` with ``NODE_PATH``
pointing there. The npm tarball ships no ``examples/`` directory, so the
scenarios are our own scripts written to behave like rhea's examples
(``server.js``/``client.js``, ``simple_send.js``/``simple_recv.js``,
``drain.js``), read from the rhea repository.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from .base import PeerUnavailable

__all__ = ["BUILD_DIR", "SPEC", "install_rhea", "rhea_version"]

BUILD_DIR = Path(__file__).resolve().parents[1] / ".build" / "rhea"
SPEC = "rhea@3"
NPM_TIMEOUT = 180.0


def _package(build_dir: Path) -> Path:
    return build_dir / "node_modules" / "rhea" / "package.json"


def install_rhea(build_dir: Path = BUILD_DIR) -> Path:
    """Install rhea with npm (once); return the ``node_modules`` directory.

    Raises PeerUnavailable with the reason when node or npm is missing or npm fails.
    """
    if shutil.which("node") is None:
        raise PeerUnavailable("node is not installed")
    if not _package(build_dir).exists():
        if shutil.which("npm") is None:
            raise PeerUnavailable("npm is not installed")
        build_dir.mkdir(parents=True, exist_ok=True)
        try:
            r = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(build_dir), SPEC],
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"npm install {SPEC} took more than {NPM_TIMEOUT:g}s") from None
        if r.returncode != 0 or not _package(build_dir).exists():
            tail = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
            raise PeerUnavailable(f"npm install {SPEC} failed: {tail}")
    return build_dir / "node_modules"


def rhea_version(build_dir: Path = BUILD_DIR) -> str:
    try:
        return str(json.loads(_package(build_dir).read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "?"
