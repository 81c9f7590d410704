"""A question about a node, re-sent after its owner's crash, is applied once.

A worker asks the owner of a node questions on the internal link
(:meth:`~.remote.RemoteNodes.ask`); those not answered when the link goes are sent again
once it is back. The owner may have applied one already: the link went after it did (the
answer was lost), or the owner crashed after storing what it changed. Each question
therefore carries an id: the asking side's *incarnation* (8 random bytes, new with each
:class:`~.remote.RemoteNodes`) and its number there, and the lowest number the asker
still waits for (its answers below that one arrived, so the owner forgets them).

- Questions that change stored state and are not idempotent (:data:`REMEMBERED`: a purge
  would drop what was published since; a deletion would answer not-found) are
  remembered by the owner with their answer: in memory, and in its store, written in the
  same store batch as the change itself (a prepared record of owner :data:`ANSWERED`
  whose id is the question's id then its answer), so an owner that restarts knows the
  answer exactly when the change survived. A repeated id is answered with the first
  answer and not applied again.
- The rest are idempotent by construction: a status or a declaration asked again answers
  the state as it is; a ``basic.get`` whose answer was lost took its message only in
  memory (released when the link went, or back from the store after a crash), so asking
  again takes a message again, at least once as on one broker; the transaction
  questions (:mod:`.transactions`) name a transaction and answer done for one already
  done.
"""

from __future__ import annotations

import struct

from ..core import Broker
from ..core import store as _store

__all__ = ["ANSWERED", "REMEMBERED", "AnswerMemo"]

ANSWERED = "workers.answered"
"""The owner, in the store's prepared records, of a remembered answer."""
REMEMBERED = frozenset({"purge", "delete"})
"""The questions whose answers are remembered (the others are idempotent)."""
_ID = struct.Struct(">8sQ")


class AnswerMemo:
    """One owner's remembered answers, for every worker that asks it (its links come and go)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._answers: dict[bytes, dict[int, tuple[bytes, bytes]]] = {}
        """Incarnation -> question number -> (its answer, its record's id in the store)."""
        for work in broker.recovered_transactions(ANSWERED):
            key = work.txn_id
            incarnation, n = _ID.unpack_from(key)
            self._answers.setdefault(incarnation, {})[n] = (key[_ID.size :], key)

    def arrived(self, incarnation: bytes, low: int) -> None:
        """The asker's answers below question ``low`` arrived: forgotten."""
        answers = self._answers.get(incarnation)
        if answers is None:
            return
        for old in [k for k in answers if k < low]:
            self._forget(answers.pop(old)[1])
        if not answers:
            del self._answers[incarnation]

    def answer(self, incarnation: bytes, n: int) -> bytes | None:
        """The first answer of question ``n`` if it was answered before (None: apply it)."""
        answers = self._answers.get(incarnation)
        got = None if answers is None else answers.get(n)
        return None if got is None else got[0]

    def remember(self, incarnation: bytes, n: int, answer: bytes) -> None:
        """Question ``n`` was applied and answered ``answer``: stored with the change it made
        (submitted in the same turn: the same store batch)."""
        key = _ID.pack(incarnation, n) + answer
        self.broker.journal.submit((_store.PREPARE, key, ANSWERED, [], []))
        self._answers.setdefault(incarnation, {})[n] = (answer, key)

    def _forget(self, key: bytes) -> None:
        self.broker.journal.submit((_store.FORGET_PREPARED, key))
