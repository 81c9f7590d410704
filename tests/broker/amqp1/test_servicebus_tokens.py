"""[servicebus] tokens, scopes and rule configuration, without a client."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import quote_plus, urlencode

import pytest
from pydantic import ValidationError

from amqp10.broker.amqp1.servicebus.tokens import check_jwt, check_sas, scope_covers
from amqp10.broker.config import BrokerConfig
from amqp10.cbs import CbsError

KEYS = {"listen": ("secret", frozenset({"Listen"}))}
NOW = 1_700_000_000.0


def sas(uri: str, expiry: int, key: str = "secret", name: str = "listen") -> str:
    sig = base64.b64encode(hmac.new(key.encode(), f"{quote_plus(uri)}\n{expiry}".encode(), hashlib.sha256).digest())
    return "SharedAccessSignature " + urlencode({"sr": uri, "sig": sig, "se": str(expiry), "skn": name})


def jwt(claims: dict[str, object], secret: str = "k", alg: str = "HS256") -> str:
    def part(d: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    head = part({"alg": alg}) + "." + part(claims)
    return head + "." + base64.urlsafe_b64encode(hmac.new(secret.encode(), head.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()


def test_sas_token_grants_its_keys_rights_until_expiry() -> None:
    grant = check_sas(sas("sb://host:1/q", int(NOW) + 60), KEYS, NOW)
    assert (grant.scope, grant.rights, grant.expires) == ("sb://host:1/q", frozenset({"Listen"}), NOW + 60)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (sas("sb://h/q", int(NOW) + 60, key="wrong"), "signature"),
        (sas("sb://h/q", int(NOW) - 1), "expired"),
        (sas("sb://h/q", int(NOW) + 60, name="nobody"), "no shared access key"),
        ("SharedAccessSignature sr=x&se=1", "lacks sig"),
        ("Bearer x", "starts with"),
    ],
)
def test_bad_sas_tokens_are_refused_with_the_reason(token: str, reason: str) -> None:
    with pytest.raises(CbsError, match=reason) as info:
        check_sas(token, KEYS, NOW)
    assert info.value.status == 401


def test_jwt_hs256_checked() -> None:
    grant = check_jwt(jwt({"exp": NOW + 5, "rights": ["Send"]}), "k", "sb://h/q", NOW)
    assert (grant.scope, grant.rights) == ("sb://h/q", frozenset({"Send"}))
    for token, secret, reason in [
        (jwt({"exp": NOW + 5}), "other", "signature"),
        (jwt({"exp": NOW - 5}), "k", "expired"),
        (jwt({"exp": NOW + 5}, alg="RS256"), "k", "HS256"),
        (jwt({"exp": NOW + 5, "rights": ["Everything"]}), "k", "rights"),
        ("a.b", "k", "three"),
    ]:
        with pytest.raises(CbsError, match=reason):
            check_jwt(token, secret, "sb://h/q", NOW)
    with pytest.raises(CbsError, match="no JWTs"):
        check_jwt(jwt({"exp": NOW + 5}), None, "sb://h/q", NOW)


def test_scope_covers_entity_paths_by_segment() -> None:
    assert scope_covers("sb://h:5/", "q")
    assert scope_covers("sb://h/Topic", "topic/Subscriptions/s")
    assert not scope_covers("sb://h/q", "q2")
    assert not scope_covers("sb://h/q/x", "q")


@pytest.mark.parametrize(
    ("rule", "reason"),
    [({"sql": "color = = 1"}, "selector error"), ({"correlation": {"colour": "x"}}, "unknown correlation")],
)
def test_a_bad_rule_is_a_configuration_error(rule: dict[str, object], reason: str) -> None:
    sub = {"name": "s", "rules": [{"name": "r", **rule}]}
    with pytest.raises(ValidationError, match=reason):
        BrokerConfig.model_validate({"servicebus": {"topics": [{"name": "t", "subscriptions": [sub]}]}})
