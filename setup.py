"""An opt-in compiled build of the hot modules (issue 31); pyproject.toml holds the rest.

By default this file adds nothing: the install is pure Python. With ``AMQP10_COMPILE=1``
the modules of ``COMPILED`` are compiled with mypyc (it needs mypy, from the dev extra, and a
C compiler; pip must not isolate the build, or it would not see mypy):

    make compiled                                     # in place, in this checkout
    AMQP10_COMPILE=1 pip install --no-build-isolation -e .

The compiled modules behave as the pure ones and pass the same tests (make test-compiled).
"""

from __future__ import annotations

import os

from setuptools import setup

# The modules a message's broker CPU goes through (bench/profiles: broker_inproc.py's
# profile and counts.py's 0-9-1 workloads), as far as mypyc compiles them.
# Not yet: the broker's core (Queue's base Node is subclassed by modules left
# interpreted), the 0-9-1 codec and front end, the broker's AMQP 1.0 front end.
COMPILED = [
    "amqp10/types/codec.py",
    "amqp10/transport/framing.py",
    "amqp10/transport/connection.py",
    "amqp10/transport/session.py",
    "amqp10/transport/link.py",
    "amqp10/transport/delivery.py",
    "amqp10/transport/serial.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("AMQP10_COMPILE", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=_ext_modules())
