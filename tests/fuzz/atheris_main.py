"""Run one fuzz target under atheris (libFuzzer), coverage-guided.

    python -m tests.fuzz.atheris_main TARGET [libFuzzer options] [corpus dirs]

e.g. ``python -m tests.fuzz.atheris_main message -runs=1000000 -max_len=4096
tests/fuzz/corpus/message``. New inputs libFuzzer finds go into the first corpus
directory given; keep the committed corpus small (``-merge=1`` into a fresh directory
minimises it). ``make fuzz`` runs every target with the corpus.
"""

from __future__ import annotations

import logging
import sys

import atheris


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    name = sys.argv.pop(1)
    logging.disable(logging.CRITICAL)  # the surfaces log every hostile input they refuse
    with atheris.instrument_imports(include=["amqp10", "wsproto"]):
        from . import targets
    target = targets.TARGETS[name]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
