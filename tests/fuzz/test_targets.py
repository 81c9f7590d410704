"""A short run of every fuzz target (the long runs: ``make fuzz``).

Each target replays its committed corpus, then 2,000 mutations of it in-process
(deterministic, no atheris needed). ``make fuzz-short`` (run by ``.ci/run``) gives each
2,000 coverage-guided atheris inputs; ``make fuzz`` the long runs.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from .targets import TARGETS

CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)  # every refused input is logged by the surface
    yield
    logging.disable(logging.NOTSET)


def seeds(name: str) -> list[bytes]:
    files = sorted((CORPUS / name).iterdir())
    assert len(files) >= 10, f"the {name} corpus is too small"
    return [f.read_bytes() for f in files]


def mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 2:
            del out[pos : pos + rng.randint(1, 16)]
        elif op == 3 and out:
            out[min(pos, len(out) - 1)] = rng.choice((0, 1, 0x40, 0x7F, 0x80, 0xFF))
        else:  # splice with another input
            cut = rng.randrange(len(other) + 1)
            out = out[:pos] + other[cut:]
    return bytes(out)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_and_mutations(name: str) -> None:
    target = TARGETS[name]
    corpus = seeds(name)
    for data in corpus:
        target(data)
    rng = random.Random(name)
    for _ in range(2000):
        target(mutate(rng, rng.choice(corpus), rng.choice(corpus)))
