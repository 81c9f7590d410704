"""The web console in a real browser: Debian's headless Chromium, driven by Playwright.

A broker on 127.0.0.1 with a users file; the page is loaded from the broker itself and
driven the way a person would (typing, clicking, the confirmation dialog), while an AMQP
client does the other side. Playwright's own browser downloads are never used: the
system's ``/usr/bin/chromium`` (``.ci/debian-packages``) runs with the flags this sandbox
needs. Waits are Playwright's (bounded by ``WAIT_MS``); the page polls once a second.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from amqp10 import errors, sync
from amqp10.broker.users import add_user
from amqp10.message import Message
from tests.broker.conftest import RunningBroker, broker_with

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 15_000
T = 10.0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/debian-packages)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    users = tmp_path_factory.mktemp("browser-users") / "users.toml"
    add_user(users, "admin", "s3cret", tags=["administrator"])
    add_user(users, "carol", "hunter2")
    with broker_with(
        tmp_path_factory.mktemp("browser-broker"),
        sasl={"users_file": users},
        security={"login_delay_base": 0.0},
    ) as b:
        yield b


@pytest.fixture
def page(browser: Browser, broker: RunningBroker) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    pg.goto(f"http://127.0.0.1:{broker.service.http_port}/console/")
    yield pg
    context.close()


def log_in(page: Page, user: str = "admin", password: str = "s3cret") -> None:
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.click("#login-submit")


def client(broker: RunningBroker) -> sync.Connection:
    return sync.connect(f"amqp://admin:s3cret@{broker.url}", timeout=T)


def node_row(page: Page, name: str) -> str:
    return f"#nodes tr[data-node='{name}']"


def test_log_in_and_watch_a_queue_fill(page: Page, broker: RunningBroker) -> None:
    log_in(page)
    expect(page.locator("#who")).to_have_text("admin")
    with client(broker) as conn:
        sender = conn.open_sender("live")
        sender.send(Message(body="first"))
        depth = page.locator(node_row(page, "live") + " td.depth")
        expect(depth).to_have_text("1")
        for i in range(6):
            sender.send(Message(body=f"more {i}"))
        expect(depth).to_have_text("7")  # the page saw the depth change as messages came
        expect(page.locator("#t-connections")).to_have_text("1")
        receiver = conn.open_receiver("live", credit=0)
        receiver.add_credit(2)
        for _ in range(2):
            receiver.receive(timeout=T)  # taken, not yet accepted
        expect(depth).to_have_text("5")
        expect(page.locator(node_row(page, "live") + " td.unacked")).to_have_text("2")
    # the chart is drawn on its canvas (pixels other than the background)
    drawn = page.evaluate(
        "() => { const c = document.getElementById('chart');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }"
    )
    assert drawn > 1000


def test_peek_then_purge(page: Page, broker: RunningBroker) -> None:
    with client(broker) as conn:
        sender = conn.open_sender("peeky")
        for i in range(3):
            sender.send(Message(body=f"hello {i}", subject="greeting"))
    log_in(page)
    page.click(node_row(page, "peeky") + " a")
    expect(page.locator("#node-title")).to_have_text("queue peeky")
    expect(page.locator("#node-facts [data-fact=depth] dd")).to_have_text("3")
    page.click("#peek")
    bodies = page.locator("#messages tbody td.body")
    expect(bodies).to_have_text(["hello 0", "hello 1", "hello 2"])
    expect(page.locator("#messages tbody tr").first).to_contain_text("greeting")
    assert broker.broker.nodes["peeky"].count == 3  # peeking took nothing
    page.click("#purge")
    expect(page.locator("#confirm-text")).to_contain_text("Purge peeky?")
    page.click("#confirm-ok")
    expect(page.locator("#status")).to_have_text("Purged 3 message(s) from peeky")
    expect(page.locator("#node-facts [data-fact=depth] dd")).to_have_text("0")
    assert broker.broker.nodes["peeky"].count == 0


def test_delete_asks_first(page: Page, broker: RunningBroker) -> None:
    with client(broker) as conn:
        conn.open_sender("doomed").send(Message(body="x"))
    log_in(page)
    page.click(node_row(page, "doomed") + " a")
    page.click("#delete")
    page.click("#confirm-cancel")
    page.wait_for_timeout(300)  # a cancelled dialog sends nothing
    assert "doomed" in broker.broker.nodes
    page.click("#delete")
    expect(page.locator("#confirm-text")).to_contain_text("cannot be undone")
    page.click("#confirm-ok")
    expect(page.locator("#overview-view")).to_be_visible()
    expect(page.locator(node_row(page, "doomed"))).to_have_count(0)
    assert "doomed" not in broker.broker.nodes


def test_close_a_connection(page: Page, broker: RunningBroker) -> None:
    log_in(page)
    with client(broker) as conn:
        sender = conn.open_sender("closing")
        sender.send(Message(body="before"))
        (mine,) = [c for c in broker.service.clients if c.handler.user == "admin"]
        page.click("#nav-connections")
        row = page.locator(f"#connections tr[data-connection='{mine.name}']")
        expect(row).to_contain_text("AMQP 1.0")
        row.locator("button.close").click()
        expect(page.locator("#confirm-text")).to_contain_text(f"Close the connection {mine.name}?")
        page.click("#confirm-ok")
        expect(page.locator("#status")).to_have_text(f"Closed {mine.name}")
        expect(row).to_have_count(0)
        with pytest.raises(errors.AMQPError, match="closed from the web console by admin"):
            for _ in range(50):  # the close reaches the client while it keeps sending
                sender.send(Message(body="after"), timeout=T)
                time.sleep(0.1)
    assert mine not in broker.service.clients


def test_failed_login(page: Page, broker: RunningBroker) -> None:
    log_in(page, "admin", "wrong")
    error = page.locator("#login-error")
    expect(error).to_have_text("wrong user name or password")
    expect(page.locator("#overview-view")).to_be_hidden()
    log_in(page, "carol", "hunter2")  # the right password, but no administrator tag
    expect(error).to_have_text(
        "user 'carol' may not use the console: it needs the administrator tag"
    )
    assert page.context.cookies() == []
    log_in(page)
    expect(page.locator("#overview-view")).to_be_visible()
    expect(error).to_be_hidden()


def test_the_quick_start_opens_without_a_login(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No users file (the README's quick start): a browser on loopback sees the overview."""
    with broker_with(tmp_path_factory.mktemp("quick-start")) as b:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            pg = context.new_page()
            pg.set_default_timeout(WAIT_MS)
            pg.goto(f"http://127.0.0.1:{b.service.http_port}/console/")
            expect(pg.locator("#overview-view")).to_be_visible()
            expect(pg.locator("#login-view")).to_be_hidden()
            expect(pg.locator("#who")).to_contain_text("guest")
            expect(pg.locator("#logout")).to_be_hidden()
            with sync.connect(f"amqp://{b.url}", timeout=T) as conn:  # anonymous
                conn.open_sender("quick").send(Message(body="hello"))
                expect(pg.locator(node_row(pg, "quick") + " td.depth")).to_have_text("1")
        finally:
            context.close()


# -- the pages over RabbitMQ's HTTP API ------------------------------------------------------
def fill_form(page: Page, form: str, **values: str) -> None:
    for name, value in values.items():
        field = page.locator(f"#{form} [name={name}]")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)


def row(page: Page, table: str, name: str) -> str:
    return f"#{table} tbody tr[data-name='{name}']"


def declare_queue(page: Page, name: str) -> None:
    """Log in, open the Queues page and declare ``name`` with its form."""
    log_in(page)
    page.click("#nav-queues")
    fill_form(page, "queue-form", name=name)
    page.click("#queue-form button[type=submit]")
    expect(page.locator("#status")).to_have_text(f"Declared {name}")


def test_queues_page_declares_publishes_gets_and_deletes(page: Page, broker: RunningBroker) -> None:
    declare_queue(page, "paged.q")
    expect(page.locator(row(page, "queues", "paged.q"))).to_contain_text("classic")
    fill_form(page, "message-form", key="paged.q", payload="from the browser")
    page.click("#publish-message")
    expect(page.locator("#status")).to_have_text("Published")
    expect(page.locator(row(page, "queues", "paged.q") + " td").nth(4)).to_have_text("1")
    fill_form(page, "get-form", queue="paged.q", ackmode="ack_requeue_false")
    page.click("#get-messages")
    expect(page.locator("#got tbody tr")).to_contain_text("from the browser")
    expect(page.locator(row(page, "queues", "paged.q") + " td").nth(4)).to_have_text("0")
    assert broker.broker.nodes["paged.q"].count == 0
    fill_form(page, "message-form", key="nowhere", payload="x")
    page.click("#publish-message")
    expect(page.locator("#status")).to_contain_text("not routed")
    page.locator(row(page, "queues", "paged.q") + " button").click()
    page.click("#confirm-ok")
    expect(page.locator(row(page, "queues", "paged.q"))).to_have_count(0)
    assert "paged.q" not in broker.broker.nodes


def test_exchanges_page_binds_and_unbinds(page: Page, broker: RunningBroker) -> None:
    declare_queue(page, "bound.q")
    page.click("#nav-exchanges")
    fill_form(page, "exchange-form", name="paged.x", type="topic")
    page.click("#exchange-form button[type=submit]")
    expect(page.locator(row(page, "exchanges", "paged.x"))).to_contain_text("topic")
    fill_form(page, "binding-form", source="paged.x", destination="bound.q", key="a.#")
    page.click("#binding-form button[type=submit]")
    binding = page.locator(row(page, "bindings", "paged.x"))
    expect(binding).to_contain_text("a.#")
    assert [b.key for b in broker.broker.default.exchanges["paged.x"].bindings.values()] == ["a.#"]
    binding.locator("button").click()
    expect(binding).to_have_count(0)
    assert not broker.broker.default.exchanges["paged.x"].bindings


def test_users_vhosts_and_policies_pages(page: Page, broker: RunningBroker) -> None:
    log_in(page)
    page.click("#nav-vhosts")
    fill_form(page, "vhost-form", name="paged-v", description="from the browser")
    page.click("#vhost-form button[type=submit]")
    expect(page.locator(row(page, "vhosts", "paged-v"))).to_contain_text("from the browser")
    page.click("#nav-users")
    fill_form(page, "user-form", name="erin", password="pw", tags="monitoring")
    page.click("#user-form button[type=submit]")
    expect(page.locator(row(page, "users", "erin"))).to_contain_text("monitoring")
    fill_form(page, "permission-form", user="erin", vhost="paged-v", configure="^erin")
    page.click("#permission-form button[type=submit]")
    expect(page.locator(row(page, "permissions", "erin"))).to_contain_text("^erin")
    page.locator(row(page, "users", "erin") + " button").click()
    page.click("#confirm-ok")
    expect(page.locator(row(page, "users", "erin"))).to_have_count(0)
    page.click("#nav-policies")
    fill_form(page, "policy-form", name="cap", pattern="^capped", apply="queues",
              definition='{"max-length": 3}')  # fmt: skip
    page.click("#policy-form button[type=submit]")
    expect(page.locator(row(page, "policies", "cap"))).to_contain_text('{"max-length":3}')
    fill_form(page, "policy-form", name="bad", pattern="x", definition="{nope")
    page.click("#policy-form button[type=submit]")
    expect(page.locator("#status")).to_contain_text("not JSON")
    page.locator(row(page, "policies", "cap") + " button").click()
    page.click("#confirm-ok")
    expect(page.locator(row(page, "policies", "cap"))).to_have_count(0)


def test_definitions_download_and_upload(page: Page, broker: RunningBroker, tmp_path: Path) -> None:
    log_in(page)
    page.click("#nav-definitions")
    with page.expect_download() as info:
        page.click("#download-definitions")
    document = json.loads(Path(info.value.path()).read_text())
    assert "admin" in {u["name"] for u in document["users"]}
    document["queues"] = [{"name": "uploaded.q", "vhost": "/", "durable": True,
                           "auto_delete": False, "arguments": {}}]  # fmt: skip
    upload = tmp_path / "defs.json"
    upload.write_text(json.dumps(document))
    page.set_input_files("#upload-form [name=file]", str(upload))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#status")).to_have_text("Imported the definitions")
    assert "uploaded.q" in broker.broker.nodes


# -- an OAuth 2 token as the login ---------------------------------------------------------------
def test_log_in_with_an_oauth2_token(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> None:
    """With ``[oauth2]``, the login view takes a token (RabbitMQ's management UI logs in with
    one): an administrator's token opens the console as its user; one without the
    administrator tag, or expired, is refused with why."""
    from tests.broker.test_e2e_oauth2 import ADMIN, token
    from tests.broker.test_oauth import KEYS

    users = tmp_path_factory.mktemp("token-users") / "users.toml"
    add_user(users, "admin", "s3cret", tags=["administrator"])
    oauth2 = {"resource_server_id": "rabbitmq", "signing_keys": KEYS}
    with broker_with(tmp_path_factory.mktemp("token-broker"), sasl={"users_file": users}, oauth2=oauth2) as b:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            pg = context.new_page()
            pg.set_default_timeout(WAIT_MS)
            pg.goto(f"http://127.0.0.1:{b.service.http_port}/console/")
            error = pg.locator("#token-error")
            for refused, why in (
                (token(scope="rabbitmq.tag:management rabbitmq.read:*/*"), "its token gives no administrator tag"),
                (token(lifetime=-5, scope=ADMIN), "the token does not log in"),
            ):
                pg.fill("#login-token", refused)
                pg.click("#token-submit")
                expect(error).to_contain_text(why)
                expect(pg.locator("#overview-view")).to_be_hidden()
            pg.fill("#login-token", token("dana", scope=ADMIN))
            pg.click("#token-submit")
            expect(pg.locator("#overview-view")).to_be_visible()
            expect(pg.locator("#who")).to_have_text("dana")
            with sync.connect(f"amqp://admin:s3cret@{b.url}", timeout=T) as conn:
                conn.open_sender("seen.by.token").send(Message(body="hello"))
                expect(pg.locator(node_row(pg, "seen.by.token") + " td.depth")).to_have_text("1")
        finally:
            context.close()
