"""OAuth 2 tokens (JWT) checked as RabbitMQ's oauth2 backend checks them: signature,
expiry, audience, user name claims and scopes (amqp10/broker/oauth.py), and the
``[oauth2]`` configuration."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from amqp10.broker.config import BrokerConfig, OAuth2Config, one_line_error
from amqp10.broker.oauth import InvalidToken, TokenGrant, TokenLogin, TokenValidator, rsa_available
from amqp10.sasl.credentials import InMemoryCredentialStore
from amqp10.sasl.mechanisms import PlainServer, ServerOutcome
from amqp10.types import SaslCode

SECRET = b"a symmetric key of thirty-two b!"
KEYS = {"k1": base64.b64encode(SECRET).decode()}
NOW = 1_800_000_000.0


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(claims: dict[str, Any], *, key: bytes = SECRET, kid: str | None = "k1", alg: str = "HS256") -> str:
    """A JWT signed with HS256 (``key``), as an authorization server issues one."""
    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    signed = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = hmac.new(key, signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{b64url(signature)}"


def claims(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"sub": "alice", "aud": "rabbitmq", "exp": NOW + 60, "scope": "rabbitmq.read:*/*"}
    out.update(kw)
    return out


def validator(**kw: Any) -> TokenValidator:
    cfg = OAuth2Config(resource_server_id="rabbitmq", signing_keys=KEYS, **kw)
    return TokenValidator(cfg, now=lambda: NOW)


def test_a_valid_token_names_its_user_scopes_and_expiry() -> None:
    scope = "rabbitmq.read:*/* rabbitmq.write:%2F/orders.* rabbitmq.tag:administrator other.read:*/* openid"
    grant = validator().validate(make_token(claims(scope=scope)))
    assert grant.user == "alice"
    assert grant.scopes == ("read:*/*", "write:%2F/orders.*", "tag:administrator")
    assert grant.expires_at == NOW + 60 and not grant.expired(NOW) and grant.expired(NOW + 60)
    assert grant.tags == {"administrator"}


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (make_token(claims(), key=b"another key of thirty-two bytes!"), "signature"),
        (make_token(claims(exp=NOW - 1)), "expired"),
        (make_token(claims(exp=NOW)), "expired"),
        (make_token(claims(nbf=NOW + 5)), "not valid yet"),
        (make_token(claims(aud="someone-else")), "audience"),
        (make_token(claims(aud=["a", "b"])), "audience"),
        (make_token(claims(), kid="k9"), "'k9' is not a configured signing key"),
        (make_token(claims(), kid=None), "no default_key"),
        (make_token(claims(), alg="none"), "algorithm"),
        (make_token(claims(exp=None)), "no 'exp'"),
        (make_token(claims(exp="soon")), "'exp' is not a number"),
        ("not.a-token", "three"),
        ("e30.e30.!!!", "base64url"),
        (b64url(b"[]") + ".e30.", "not a JSON object"),
    ],
)
def test_tokens_that_do_not_log_in_say_why(token: str, why: str) -> None:
    with pytest.raises(InvalidToken, match=why):
        validator().validate(token)


def test_audience_lists_default_key_and_aud_check_off() -> None:
    assert validator().validate(make_token(claims(aud=["x", "rabbitmq"]))).user == "alice"
    assert validator(default_key="k1").validate(make_token(claims(), kid=None)).user == "alice"
    assert validator(verify_aud=False).validate(make_token(claims(aud="x"))).user == "alice"


def test_user_name_claims_prefix_and_extra_scopes() -> None:
    v = validator(preferred_username_claims=["user_name"], scope_prefix="mq/", extra_scopes_source="roles")
    token = make_token(claims(user_name="bob", scope=["mq/read:*/*", "rabbitmq.write:*/*"], roles="mq/configure:*/q1 x"))
    grant = v.validate(token)
    assert grant.user == "bob"
    assert grant.scopes == ("read:*/*", "configure:*/q1")
    assert validator().validate(make_token(claims(sub=None, client_id="svc"))).user == "svc"
    assert validator().validate(make_token(claims(sub=None))).user == "unknown"  # as RabbitMQ names it


def test_scopes_allow_actions_on_names_in_vhosts() -> None:
    scopes = ("read:*/*", "write:%2F/orders.*", "configure:shop/cart-*/ignored", "write:shop")
    grant = TokenGrant("alice", scopes, None)
    assert grant.allows("/", "read", "anything") and grant.allows("shop", "read", "x")
    assert grant.allows("/", "write", "orders.eu") and not grant.allows("/", "write", "orders")
    assert not grant.allows("/", "write", "my-orders.eu")  # a glob matches the whole name
    assert not grant.allows("shop", "write", "orders.eu")
    assert grant.allows("shop", "configure", "cart-1") and not grant.allows("/", "configure", "cart-1")
    assert grant.vhost_denial("/") is None and grant.vhost_denial("shop") is None
    assert grant.denial("/", "configure", "queue", "q") is not None
    assert grant.denial("/", "write", "exchange", "") is not None  # checked as amq.default
    no_vhost = TokenGrant("bob", ("write:shop/*",), None)
    refused = no_vhost.vhost_denial("/")
    assert refused is not None and "bob" in refused


def test_renewal_keeps_the_user() -> None:
    v = validator()
    current = v.validate(make_token(claims()))
    renewed = v.renew(current, make_token(claims(exp=NOW + 600, scope="rabbitmq.write:*/*")))
    assert renewed.expires_at == NOW + 600 and renewed.scopes == ("write:*/*",)
    with pytest.raises(InvalidToken, match="'mallory', not 'alice'"):
        v.renew(current, make_token(claims(sub="mallory")))
    with pytest.raises(InvalidToken, match="expired"):
        v.renew(current, make_token(claims(exp=NOW - 1)))


def test_plain_takes_a_token_as_the_password_before_the_users_file() -> None:
    store = InMemoryCredentialStore()
    store.add_user("carol", "carol-pw", iterations=4096)
    tokens = TokenLogin(validator())
    ok = PlainServer(store, password_check=tokens).step(b"\x00anyone\x00" + make_token(claims()).encode())
    assert isinstance(ok, ServerOutcome) and ok.code is SaslCode.OK and ok.identity == "alice"
    assert tokens.grant is not None and tokens.grant.user == "alice"
    file_user = PlainServer(store, password_check=TokenLogin(validator())).step(b"\x00carol\x00carol-pw")
    assert isinstance(file_user, ServerOutcome) and file_user.identity == "carol"
    bad = PlainServer(store, password_check=TokenLogin(validator())).step(
        b"\x00anyone\x00" + make_token(claims(aud="x")).encode()
    )
    assert isinstance(bad, ServerOutcome) and bad.code is SaslCode.AUTH
    other = PlainServer(store, password_check=TokenLogin(validator())).step(
        b"bob\x00anyone\x00" + make_token(claims()).encode()
    )
    assert isinstance(other, ServerOutcome) and other.code is SaslCode.AUTH  # may not act as bob


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"resource_server_id": "rabbitmq"}, "signing_keys"),
        ({"resource_server_id": "rabbitmq", "signing_keys": {"k": "not base64!"}}, "signing_keys"),
        ({"resource_server_id": "rabbitmq", "signing_keys": KEYS, "default_key": "k2"}, "default_key"),
        ({"resource_server_id": "rabbitmq", "signing_keys": KEYS, "verify_aud": "perhaps"}, "verify_aud"),
        ({"resource_server": "rabbitmq"}, "resource_server"),
    ],
)
def test_a_bad_oauth2_section_names_the_field(section: dict[str, Any], field: str) -> None:
    with pytest.raises(Exception) as refused:
        BrokerConfig.model_validate({"oauth2": section})
    assert field in one_line_error(refused.value)


def test_a_pem_key_without_cryptography_is_refused_clearly() -> None:
    if rsa_available():
        pytest.skip("cryptography is installed: RS256 works")
    pem = "-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----"
    with pytest.raises(Exception) as refused:
        BrokerConfig.model_validate({"oauth2": {"resource_server_id": "r", "signing_keys": {"k": pem}}})
    assert "signing_keys" in one_line_error(refused.value) and "amqp10[oauth]" in one_line_error(refused.value)


def test_rs256_tokens_with_a_pem_public_key() -> None:
    pytest.importorskip("cryptography", reason="RS256 needs the optional cryptography package (amqp10[oauth])")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    v = TokenValidator(OAuth2Config(resource_server_id="rabbitmq", signing_keys={"rsa": pem}), now=lambda: NOW)
    header = b64url(json.dumps({"alg": "RS256", "kid": "rsa"}).encode())
    signed = f"{header}.{b64url(json.dumps(claims()).encode())}"
    signature = private.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
    assert v.validate(f"{signed}.{b64url(signature)}").user == "alice"
    with pytest.raises(InvalidToken, match="signature"):
        v.validate(f"{signed}.{b64url(signature[:-1] + bytes([signature[-1] ^ 1]))}")
    with pytest.raises(InvalidToken, match="algorithm"):  # an HS256 token may not use the RSA key
        v.validate(make_token(claims(), kid="rsa"))
