"""The 1.0 router: Service Bus comes in only as a plug-in, and ``tick()`` runs out its tokens."""

from __future__ import annotations

from amqp10.broker.amqp1.plugin import NO_PLUGIN
from amqp10.broker.amqp1.servicebus.entities import declare_entities
from amqp10.broker.amqp1.servicebus.plugin import ServiceBusPlugin
from amqp10.broker.amqp1.servicebus.tokens import Grant
from amqp10.broker.config import BrokerConfig
from amqp10.types import ErrorCondition
from tests.broker.core.test_leases import Clock
from tests.broker.harness import Net


def test_a_connection_without_claims_runs_the_plug_in_that_adds_nothing() -> None:
    config = BrokerConfig.model_validate({"servicebus": {"enabled": True, "queues": [{"name": "q"}]}})
    c = Net(config).client()
    assert c.handler.ctx.plugin is NO_PLUGIN and c.handler.gate is None
    c.handler.use_claims(config.servicebus)
    assert isinstance(c.handler.ctx.plugin, ServiceBusPlugin) and c.handler.gate is not None
    c.handler.use_claims(None)  # a user after SASL: permissions, not tokens
    assert c.handler.ctx.plugin is NO_PLUGIN and c.handler.gate is None


def test_tick_detaches_a_link_whose_token_ran_out() -> None:
    clock = Clock()
    config = BrokerConfig.model_validate({"servicebus": {"enabled": True, "queues": [{"name": "q"}]}})
    net = Net(config, now=clock)
    declare_entities(net.broker.default, config.servicebus)
    c = net.client()
    c.handler.use_claims(config.servicebus)
    assert c.handler.gate is not None
    c.handler.gate.grants["q"] = Grant("sb://host/q", frozenset({"Send"}), clock.t + 60)
    s = c.sender("q")
    assert s.is_attached
    c.handler.tick()
    net.pump()
    assert s.is_attached  # the token still holds
    clock.t += 61
    c.handler.tick()
    net.pump()
    assert not s.is_attached
    detach = s.remote_detach
    assert detach is not None and detach.error is not None
    assert detach.error.condition == ErrorCondition.UNAUTHORIZED_ACCESS
