"""Scenarios for ``qpid.messaging`` (qpid-python 1.36) against our broker over AMQP 0-10.

This file runs under **Python 2.7** (qpid-python's interpreter), started by
``interop/qpid_messaging.py``: ``python2.7 qpid_client.py HOST:PORT USER PASSWORD``. It
writes one JSON line per scenario: ``{"id": ..., "ok": true|false, "detail": ...}``.
It is kept to what both Python 2.7 and 3 parse (no f-strings; print via sys.stdout);
every literal is text (``unicode_literals``): what ``qpid.messaging`` sends as ``text/plain``.
"""

from __future__ import unicode_literals

import contextlib
import json
import os
import signal
import sys
import time
import traceback
import uuid

from qpid.messaging import (  # type: ignore[import-not-found]
    REJECTED,
    RELEASED,
    Connection,
    Disposition,
    Empty,
    Message,
)
from qpid.messaging.exceptions import ConnectionError as QpidConnectionError  # type: ignore[import-not-found]

TIMEOUT = 5
SCENARIO_TIMEOUT = 60


class ScenarioTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise ScenarioTimeout("the scenario took over %d s" % SCENARIO_TIMEOUT)


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def check(cond, what):
    if not cond:
        raise AssertionError(what)


@contextlib.contextmanager
def connected(url, **options):
    """An open connection, closed when the block ends."""
    c = Connection(url, **options)
    c.open()
    try:
        yield c
    finally:
        c.close()


@contextlib.contextmanager
def session(url, **options):
    """A session on an open connection (:func:`connected`)."""
    with connected(url, **options) as c:
        yield c.session()


def nothing_more(receiver, what):
    """Check that ``receiver`` gets nothing more (``what`` names what would have come)."""
    try:
        extra = receiver.fetch(timeout=0.5)
    except Empty:
        return
    raise AssertionError("%s %r" % (what, extra.content))


def s_connect_anonymous(url, user, password):
    with connected(url, sasl_mechanisms="ANONYMOUS"):
        pass
    return "ANONYMOUS login, open, close"


def s_connect_plain(url, user, password):
    with connected(url, username=user, password=password, sasl_mechanisms="PLAIN"):
        pass
    return "PLAIN login as %s" % user


def s_bad_password(url, user, password):
    c = Connection(url, username=user, password="wrong", sasl_mechanisms="PLAIN", reconnect=False)
    try:
        c.open()
    except QpidConnectionError as e:
        return "refused: %s" % e
    c.close()
    raise AssertionError("a wrong password was let in")


def s_send_receive(url, user, password):
    with session(url) as s:
        q = unique("sr")
        snd = s.sender("%s; {create: always}" % q)
        cid = b"corr-1"  # (a vbin16: bytes in Python 2)
        snd.send(
            Message(
                "hello 0-10",
                subject="greeting",
                correlation_id=cid,
                properties={"n": 42, "s": "text", "f": 1.5, "b": True},
                durable=True,
                priority=7,
            )
        )
        rcv = s.receiver(q)
        m = rcv.fetch(timeout=TIMEOUT)
        s.acknowledge()
        check(m.content == "hello 0-10", "content %r" % (m.content,))
        check(m.subject == "greeting", "subject %r" % (m.subject,))
        check(m.correlation_id == cid, "correlation_id %r" % (m.correlation_id,))
        check(
            m.properties.get("n") == 42 and m.properties.get("s") == "text",
            "properties %r" % (m.properties,),
        )
        check(
            m.properties.get("f") == 1.5 and m.properties.get("b") is True,
            "properties %r" % (m.properties,),
        )
        check(m.durable and m.priority == 7, "durable %r priority %r" % (m.durable, m.priority))
        return "text, subject, correlation-id, properties, durable, priority round trip"


def s_map_and_list(url, user, password):
    with session(url) as s:
        q = unique("map")
        snd = s.sender("%s; {create: always}" % q)
        body = {"a": 1, "b": [1, 2, "three"], "c": {"d": None}}
        snd.send(Message(body))
        snd.send(Message([1, "two", 3.0]))
        rcv = s.receiver(q)
        m1, m2 = rcv.fetch(timeout=TIMEOUT), rcv.fetch(timeout=TIMEOUT)
        s.acknowledge()
        check(m1.content == body, "map %r" % (m1.content,))
        check(m2.content == [1, "two", 3.0], "list %r" % (m2.content,))
        return "amqp/map and amqp/list bodies"


def s_large(url, user, password):
    with session(url) as s:
        q = unique("big")
        snd = s.sender("%s; {create: always}" % q)
        body = b"x" * (1024 * 1024)
        snd.send(Message(body, content_type="application/octet-stream"))
        m = s.receiver(q).fetch(timeout=TIMEOUT)
        s.acknowledge()
        check(len(m.content) == len(body), "%d octets back" % len(m.content))
        return "1 MiB message over many frames"


def s_browse(url, user, password):
    with session(url) as s:
        q = unique("browse")
        snd = s.sender("%s; {create: always}" % q)
        for i in range(3):
            snd.send(Message("m%d" % i))
        b = s.receiver("%s; {mode: browse}" % q)
        seen = [b.fetch(timeout=TIMEOUT).content for _ in range(3)]
        check(seen == ["m0", "m1", "m2"], "browsed %r" % (seen,))
        nothing_more(b, "browsed a fourth message")
        r = s.receiver(q)
        got = [r.fetch(timeout=TIMEOUT).content for _ in range(3)]
        s.acknowledge()
        check(got == seen, "consumed %r after browsing" % (got,))
        return "browsed 3 (not acquired), then consumed the same 3"


def s_request_response(url, user, password):
    with connected(url) as c:
        server = c.session()
        client = c.session()
        requests = unique("requests")
        replies = unique("replies")
        server_rcv = server.receiver("%s; {create: always}" % requests)
        reply_rcv = client.receiver("%s; {create: always, delete: always}" % replies)
        client.sender(requests).send(Message("ping", reply_to=replies, correlation_id=b"c-7"))
        req = server_rcv.fetch(timeout=TIMEOUT)
        server.sender(req.reply_to).send(Message("pong", correlation_id=req.correlation_id))
        server.acknowledge()
        resp = reply_rcv.fetch(timeout=TIMEOUT)
        client.acknowledge()
        check(
            resp.content == "pong" and resp.correlation_id == b"c-7",
            "response %r %r" % (resp.content, resp.correlation_id),
        )
        return "request with reply-to %s answered on it" % replies


def s_topic(url, user, password):
    with session(url) as s:
        news = s.receiver("amq.topic/news.#")
        sport = s.receiver("amq.topic/*.sport")
        snd = s.sender("amq.topic")
        snd.send(Message("goal", subject="news.sport"))
        snd.send(Message("rain", subject="news.weather"))
        got = sorted([news.fetch(timeout=TIMEOUT).content, news.fetch(timeout=TIMEOUT).content])
        check(got == ["goal", "rain"], "news.# got %r" % (got,))
        m = sport.fetch(timeout=TIMEOUT)
        check(
            m.content == "goal" and m.subject == "news.sport",
            "*.sport got %r %r" % (m.content, m.subject),
        )
        s.acknowledge()
        return "amq.topic subscriptions with wildcards"


def s_create_exchange(url, user, password):
    with session(url) as s:
        x = unique("fan")
        snd = s.sender("%s; {create: always, node: {type: topic, x-declare: {type: fanout}}}" % x)
        r1 = s.receiver(x)
        r2 = s.receiver(x)
        snd.send(Message("to all"))
        check(r1.fetch(timeout=TIMEOUT).content == "to all", "first subscriber")
        check(r2.fetch(timeout=TIMEOUT).content == "to all", "second subscriber")
        s.acknowledge()
        return "a fanout exchange made by an address (create: always, x-declare)"


def s_reject_release(url, user, password):
    with session(url) as s:
        q = unique("rr")
        snd = s.sender("%s; {create: always}" % q)
        snd.send(Message("one"))
        snd.send(Message("two"))
        r = s.receiver(q)
        m1 = r.fetch(timeout=TIMEOUT)
        s.acknowledge(m1, Disposition(RELEASED, set_redelivered=True))
        again = r.fetch(timeout=TIMEOUT)
        check(
            again.content == "one" and again.redelivered,
            "released message back %r redelivered=%r" % (again.content, again.redelivered),
        )
        s.acknowledge(again)
        m2 = r.fetch(timeout=TIMEOUT)
        check(m2.content == "two", "then %r" % (m2.content,))
        s.acknowledge(m2, Disposition(REJECTED))
        nothing_more(r, "rejected message came back")
        return "released (redelivered) comes back; rejected does not"


def s_transactions(url, user, password):
    with connected(url) as c:
        q = unique("tx")
        plain = c.session()
        plain.sender("%s; {create: always}" % q)
        tx = c.session(transactional=True)
        snd = tx.sender(q)
        snd.send(Message("rolled back"))
        tx.rollback()
        snd.send(Message("committed"))
        tx.commit()
        r = plain.receiver(q)
        m = r.fetch(timeout=TIMEOUT)
        check(m.content == "committed", "got %r" % (m.content,))
        plain.acknowledge()
        nothing_more(r, "a rolled back message arrived")
        return "tx.select, rollback drops a send, commit delivers one"


def s_unreliable(url, user, password):
    with session(url) as s:
        q = unique("unrel")
        snd = s.sender("%s; {create: always, link: {reliability: unreliable}}" % q)
        for i in range(100):
            snd.send(Message("m%d" % i), sync=False)
        snd.sync()
        r = s.receiver("%s; {link: {reliability: unreliable}}" % q)
        r.capacity = 10
        got = [r.fetch(timeout=TIMEOUT).content for _ in range(100)]
        check(got == ["m%d" % i for i in range(100)], "order %r" % (got[:5],))
        return "100 messages async with prefetch 10, no acknowledgements"


def s_heartbeat(url, user, password):
    with session(url, heartbeat=1) as s:
        q = unique("hb")
        snd = s.sender("%s; {create: always}" % q)
        time.sleep(3.5)  # idle past 2 heartbeat intervals: both sides keep it alive
        snd.send(Message("after idling"))
        m = s.receiver(q).fetch(timeout=TIMEOUT)
        s.acknowledge()
        check(m.content == "after idling", "got %r" % (m.content,))
        return "heartbeat 1 s negotiated; 3.5 s idle survived"


def s_missing_queue(url, user, password):
    with session(url) as s:
        try:
            s.receiver("no-such-queue-%s" % uuid.uuid4().hex[:6]).fetch(timeout=TIMEOUT)
        except Exception as e:
            return "refused: %s: %s" % (type(e).__name__, e)
        raise AssertionError("a missing queue was read")


def s_tls_external(url, user, password):
    """Over the TLS listener (``$QPID_TLS``: port, CA, client certificate, key): PLAIN, then
    EXTERNAL with the client certificate; a message sent with one is read with the other."""
    port, ca, cert, key = os.environ["QPID_TLS"].split(os.pathsep)
    tls_url = "127.0.0.1:%s" % port
    q = unique("tls")
    with session(tls_url, transport="ssl", ssl_trustfile=ca, username=user, password=password,
                 sasl_mechanisms="PLAIN") as s:
        s.sender("%s; {create: always}" % q).send(Message("over TLS"))
    with session(tls_url, transport="ssl", ssl_trustfile=ca, ssl_certfile=cert, ssl_keyfile=key,
                 sasl_mechanisms="EXTERNAL") as s:
        m = s.receiver(q).fetch(timeout=10)
        s.acknowledge()
    check(m.content == "over TLS", "the message sent with PLAIN read with EXTERNAL")
    return "ssl transport: PLAIN as %s, then EXTERNAL with a client certificate" % user


SCENARIOS = [
    ("connect-anonymous", s_connect_anonymous),
    ("connect-plain", s_connect_plain),
    ("bad-password", s_bad_password),
    ("send-receive", s_send_receive),
    ("map-list-bodies", s_map_and_list),
    ("large-message", s_large),
    ("browse", s_browse),
    ("request-response", s_request_response),
    ("topic", s_topic),
    ("create-exchange", s_create_exchange),
    ("reject-release", s_reject_release),
    ("transactions", s_transactions),
    ("unreliable-prefetch", s_unreliable),
    ("heartbeat", s_heartbeat),
    ("missing-queue", s_missing_queue),
    ("tls-external", s_tls_external),
]


# -- one side of the interop matrix's cross-protocol rows (interop/scenarios/qpid010.py) --
def cross_send(url, user, password, queue):
    """Send the matrix's 0-10 message (every property it maps) to ``queue``."""
    with session(url, username=user, password=password) as s:
        s.sender(queue).send(
            Message(
                "from 0-10",
                content_type="text/plain",
                subject="subj-010",
                correlation_id=b"corr-010",
                reply_to="%s.replies" % queue,
                properties={"str": "text", "int": 42, "true": True, "JMSXGroupID": "g1"},
                durable=True,
                priority=6,
                ttl=60,
            )
        )
    return {"sent": queue}


def cross_receive(url, user, password, queue):
    """Read one message from ``queue``: what qpid.messaging makes of it."""
    with session(url, username=user, password=password) as s:
        m = s.receiver(queue).fetch(timeout=TIMEOUT)
        s.acknowledge()
    return {
        "content": m.content.decode("utf-8") if isinstance(m.content, bytes) else m.content,
        "content_type": m.content_type,
        "subject": m.subject,
        "correlation_id": m.correlation_id,
        "reply_to": None if m.reply_to is None else str(m.reply_to),
        "durable": m.durable,
        "priority": m.priority,
        "properties": dict(m.properties),
    }


def main(argv):
    if argv[1] in ("--send", "--receive"):  # --send|--receive URL USER PASSWORD QUEUE
        act = cross_send if argv[1] == "--send" else cross_receive
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(SCENARIO_TIMEOUT)
        sys.stdout.write(json.dumps(act(*argv[2:6])) + "\n")
        return
    url, user, password = argv[1], argv[2], argv[3]
    only = set(argv[4].split(",")) if len(argv) > 4 and argv[4] else None
    signal.signal(signal.SIGALRM, _alarm)
    for sid, run in SCENARIOS:
        if only and sid not in only:
            continue
        start = time.time()
        signal.alarm(SCENARIO_TIMEOUT)
        try:
            detail = run(url, user, password)
            ok = True
        except Exception:
            detail = traceback.format_exc().strip().splitlines()[-1]
            ok = False
        finally:
            signal.alarm(0)
        line = {"id": sid, "ok": ok, "detail": detail, "seconds": round(time.time() - start, 2)}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
