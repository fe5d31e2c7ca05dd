"""SASL, sans I/O: Kafka's JAAS syntax, SCRAM (RFC 7677's test vector), PLAIN, unsecured
OAUTHBEARER tokens, the per-connection state machine (handshake, failures, re-authentication),
the controller's AlterUserScramCredentials validation and the tools' SCRAM arguments."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from odradek.controller.scram_control_manager import ScramControlManager, describe_credentials
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.header import RequestHeader, decode_response_header, encode_request_header
from odradek.protocol.schema import Api
from odradek.security.jaas_config import JaasConfigError, parse_jaas_config, single_entry
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.security.oauthbearer_sasl_server import OAuthBearerSaslServer
from odradek.security.plain_sasl_server import INVALID_CREDENTIALS, PlainSaslServer
from odradek.security.sasl_client_authenticator import ScramSaslClient, unsecured_token
from odradek.security.sasl_config import SaslListenerConfig
from odradek.security.sasl_server import SaslAuthenticationError, SaslError
from odradek.security.sasl_server_authenticator import SaslAuthenticator, SaslState, StepKind
from odradek.security.scram_credential import ScramCredential, ScramMechanism, generate_credential
from odradek.security.scram_parser import ScramParseError, parse_add_config, parse_add_scram
from odradek.security.scram_sasl_server import ScramSaslServer

# -- JAAS ----------------------------------------------------------------------------------------


def test_jaas_plain_login_module_with_users() -> None:
    entry = single_entry(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
    )
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": "alice-secret"}


def test_jaas_quoting_escapes_comments_and_bare_words() -> None:
    entries = parse_jaas_config(
        '/* c */ a.B OPTIONAL k1="x \\"y\\" ; = , z" k2=bare-word // trailing\n;\n'
        "c.D sufficient ;"
    )
    assert [(e.login_module, e.flag) for e in entries] == [("a.B", "optional"), ("c.D", "sufficient")]
    assert entries[0].options == {"k1": 'x "y" ; = , z', "k2": "bare-word"}


@pytest.mark.parametrize("text", [
    "", "a.B required", "a.B mandatory;", 'a.B required k="unterminated;', "a.B required k=;",
    'a.B required k "v";', "a.B required; c.D required;",
])
def test_jaas_malformed(text: str) -> None:
    with pytest.raises(JaasConfigError):
        single_entry(text)


# -- SCRAM ---------------------------------------------------------------------------------------

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_scram_sha_256_rfc7677_vector() -> None:
    cred = generate_credential(ScramMechanism.SCRAM_SHA_256, "pencil", 4096, RFC7677_SALT)
    server = ScramSaslServer(
        ScramMechanism.SCRAM_SHA_256, lambda mech, user: cred if user == "user" else None,
        server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate_response(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mech", list(ScramMechanism))
def test_scram_client_and_server(mech: ScramMechanism) -> None:
    creds = {"al=ice,x": generate_credential(mech, "s3cret", 8192)}
    server = ScramSaslServer(mech, lambda mm, user: creds.get(user) if mm is mech else None)
    client = ScramSaslClient(mech, "al=ice,x", "s3cret")
    final = server.evaluate_response(client.final_message(server.evaluate_response(client.first_message())))
    client.verify_server_final(final)
    assert server.authorization_id == "al=ice,x"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "s3cret")])
def test_scram_unknown_user_and_wrong_password_fail_alike(user: str, password: str) -> None:
    """An unknown user still gets a salt and iterations; both fail at the proof."""
    creds = {"alice": generate_credential(ScramMechanism.SCRAM_SHA_512, "s3cret")}
    server = ScramSaslServer(ScramMechanism.SCRAM_SHA_512, lambda mm, u: creds.get(u))
    client = ScramSaslClient(ScramMechanism.SCRAM_SHA_512, user, password)
    server_first = server.evaluate_response(client.first_message())
    assert b",s=" in server_first and server_first.endswith(b",i=4096")
    with pytest.raises(SaslError, match="Invalid client credentials"):
        server.evaluate_response(client.final_message(server_first))
    assert not server.complete


def test_scram_rejects_tokens_and_bad_messages() -> None:
    creds = {"alice": generate_credential(ScramMechanism.SCRAM_SHA_256, "s3cret")}
    lookup = lambda mm, u: creds.get(u)  # noqa: E731
    with pytest.raises(SaslError, match="delegation token"):
        ScramSaslServer(ScramMechanism.SCRAM_SHA_256, lookup).evaluate_response(b"n,,n=alice,r=abc,tokenauth=true")
    with pytest.raises(SaslError, match="first message"):
        ScramSaslServer(ScramMechanism.SCRAM_SHA_256, lookup).evaluate_response(b"p=tls-unique,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        ScramSaslServer(ScramMechanism.SCRAM_SHA_256, lookup).evaluate_response(b"n,a=bob,n=alice,r=abc")
    server = ScramSaslServer(ScramMechanism.SCRAM_SHA_256, lookup)
    server.evaluate_response(b"n,,n=alice,r=abc")
    with pytest.raises(SaslError, match="nonce"):
        server.evaluate_response(b"c=biws,r=other,p=AAAA")


# -- PLAIN and OAUTHBEARER -----------------------------------------------------------------------


def test_plain() -> None:
    users = {"alice": "alice-secret"}
    ok = PlainSaslServer(users)
    assert ok.evaluate_response(b"\x00alice\x00alice-secret") == b""
    assert ok.authorization_id == "alice"
    for token in (b"\x00alice\x00nope", b"\x00mallory\x00alice-secret"):
        with pytest.raises(SaslAuthenticationError) as info:
            PlainSaslServer(users).evaluate_response(token)
        assert str(info.value) == INVALID_CREDENTIALS
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        PlainSaslServer(users).evaluate_response(b"bob\x00alice\x00alice-secret")
    with pytest.raises(SaslAuthenticationError, match="3 tokens"):
        PlainSaslServer(users).evaluate_response(b"alice-secret")


def _jws(header: dict[str, Any], claims: dict[str, Any]) -> str:
    def enc(o: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()

    return f"{enc(header)}.{enc(claims)}."


def _oauth(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured_token() -> None:
    now_ms = 1_000_000_000_000
    server = OAuthBearerSaslServer({}, lambda: now_ms)
    token = unsecured_token({"unsecuredLoginStringClaim_sub": "alice"}, now_s=now_ms / 1000)
    assert server.evaluate_response(_oauth(token)) == b""
    assert server.authorization_id == "alice"
    assert server.credential_lifetime_ms() == now_ms + 3600 * 1000


@pytest.mark.parametrize("header,claims,options", [
    ({"alg": "HS256"}, {"sub": "a", "exp": 2e9}, {}),
    ({"alg": "none"}, {"exp": 2e9}, {}),
    ({"alg": "none"}, {"sub": "a", "exp": 999_999_999}, {}),  # expired
    ({"alg": "none"}, {"sub": "a", "exp": 2e9, "scope": "read"}, {"unsecuredValidatorRequiredScope": "write"}),
])
def test_oauthbearer_invalid_tokens(header: dict[str, Any], claims: dict[str, Any], options: dict[str, str]) -> None:
    server = OAuthBearerSaslServer(options, lambda: 1_000_000_000_000)
    challenge = server.evaluate_response(_oauth(_jws(header, claims)))
    assert json.loads(challenge) == {"status": "invalid_token"}
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        server.evaluate_response(b"\x01")
    assert not server.complete


# -- the connection's state machine --------------------------------------------------------------

CONFIG = SaslListenerConfig(
    listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT",
    enabled_mechanisms=("PLAIN", "SCRAM-SHA-256"),
    jaas={"PLAIN": single_entry('x.Plain required user_alice="a-pw" user_bob="b-pw";')},
    reauth_ms={"PLAIN": 1000, "SCRAM-SHA-256": 0},
)
CREDS = {"alice": generate_credential(ScramMechanism.SCRAM_SHA_256, "a-pw")}


def _auth(config: SaslListenerConfig = CONFIG) -> SaslAuthenticator:
    return SaslAuthenticator(config, lambda mm, u: CREDS.get(u), connection_id="c", peer="p",
                             wall_clock_ms=lambda: 0)


def _frame(api: Api, version: int, body: dict[str, Any], cid: int = 1) -> bytes:
    header = encode_request_header(RequestHeader(api.api_key, version, cid, "t"), api.request_header_version(version))
    return header + b"".join(bytes(b) for b in api.encode_request(version, body))


def _decode(api: Api, version: int, parts: list[bytes] | None) -> dict[str, Any]:
    assert parts is not None
    data = b"".join(parts)
    _, pos = decode_response_header(data, api.response_header_version(version))
    return api.decode_response(version, data, pos)[0]


def test_state_machine_plain_login_and_pass_through() -> None:
    a = _auth()
    versions = _frame(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert a.receive(versions, 0).kind is StepKind.PASS
    step = a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    assert _decode(m.SASL_HANDSHAKE, 1, step.response) == {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
    step = a.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00a-pw"}), 10)
    resp = _decode(m.SASL_AUTHENTICATE, 1, step.response)
    assert resp["error_code"] == 0 and resp["session_lifetime_ms"] == 1000
    assert a.authenticated_now and a.principal == KafkaPrincipal("User", "alice")
    assert a.receive(_frame(m.METADATA, 12, {"topics": None}), 500).kind is StepKind.PASS
    # the session expired: the next request (not a handshake) closes the connection
    step = a.receive(_frame(m.METADATA, 12, {"topics": None}), 1010)
    assert step.kind is StepKind.CLOSE and "did not re-authenticate" in step.reason


def test_state_machine_reauthentication() -> None:
    a = _auth()
    a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    a.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00a-pw"}), 0)
    # re-authenticate after expiry: allowed, same principal
    assert a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 2000).kind is StepKind.RESPOND
    step = a.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00a-pw"}), 2000)
    assert step.kind is StepKind.RESPOND and a.reauthenticated and a.session_expiry_ms == 3000
    # another principal: refused
    a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 2500)
    step = a.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00bob\x00b-pw"}), 2500)
    assert step.kind is StepKind.FAIL and "Cannot change principals" in step.reason
    # another mechanism: refused at the token
    b = _auth()
    b.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    b.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00a-pw"}), 0)
    assert b.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}), 100).kind is StepKind.RESPOND
    step = b.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,n=alice,r=x"}), 100)
    assert step.kind is StepKind.FAIL and "not supported for re-authentication" in step.reason


def test_state_machine_failures() -> None:
    a = _auth()
    step = a.receive(_frame(m.METADATA, 12, {"topics": None}), 0)
    assert step.kind is StepKind.CLOSE and "Unexpected Kafka request of type Metadata during SASL handshake" in step.reason
    assert a.receive(_frame(m.METADATA, 12, {"topics": None}), 0).kind is StepKind.CLOSE  # stays failed

    a = _auth()
    step = a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}), 0)
    assert step.kind is StepKind.FAIL
    assert _decode(m.SASL_HANDSHAKE, 1, step.response)["error_code"] == Errors.UNSUPPORTED_SASL_MECHANISM

    a = _auth()
    a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    step = a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    assert step.kind is StepKind.FAIL
    assert _decode(m.SASL_HANDSHAKE, 1, step.response)["error_code"] == Errors.ILLEGAL_SASL_STATE

    a = _auth()
    a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}), 0)
    a.receive(_frame(m.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=abc"}), 0)
    step = a.receive(_frame(m.SASL_AUTHENTICATE, 2, {"auth_bytes": b"c=biws,r=abc,p=AAAA"}), 0)
    resp = _decode(m.SASL_AUTHENTICATE, 2, step.response)
    assert step.kind is StepKind.FAIL and resp["error_code"] == Errors.SASL_AUTHENTICATION_FAILED
    assert resp["error_message"] == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )
    assert a.state is SaslState.FAILED

    small = SaslListenerConfig(**{**CONFIG.__dict__, "max_receive_size": 64})
    a = _auth(small)
    a.receive(_frame(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    step = a.receive(_frame(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"x" * 100}), 0)
    assert step.kind is StepKind.CLOSE and "sasl.server.max.receive.size=64" in step.reason


def test_state_machine_v0_raw_tokens() -> None:
    a = _auth()
    a.receive(_frame(m.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}), 0)
    step = a.receive(b"\x00alice\x00a-pw", 0)
    assert step.kind is StepKind.RESPOND and step.response == [b""] and a.principal == KafkaPrincipal("User", "alice")
    b = _auth()
    b.receive(_frame(m.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}), 0)
    step = b.receive(b"\x00alice\x00wrong", 0)
    assert step.kind is StepKind.FAIL and step.response is None


# -- AlterUserScramCredentials on the controller -------------------------------------------------


def _image_with(records: list[tuple[str, dict[str, Any]]]) -> MetadataImage:
    d = MetadataDelta(EMPTY_IMAGE)
    for i, (name, r) in enumerate(records):
        d.replay(name, r, i)
    return d.apply()


def _upsert(name: str, mech: int = 1, iterations: int = 4096) -> dict[str, Any]:
    return {"name": name, "mechanism": mech, "iterations": iterations, "salt": b"salt", "salted_password": b"x" * 32}


def test_scram_control_manager_validation_and_records() -> None:
    mgr = ScramControlManager(EMPTY_IMAGE)
    response, records = mgr.alter_credentials({
        "deletions": [{"name": "ghost", "mechanism": 1}, {"name": "dup", "mechanism": 1}],
        "upsertions": [_upsert("alice"), _upsert("", 1), _upsert("bob", 3), _upsert("few", 1, 1000),
                       _upsert("many", 2, 20000), _upsert("dup", 2)],
    })
    results = {r["user"]: (r["error_code"], r["error_message"]) for r in response["results"]}
    assert results == {
        "alice": (Errors.NONE, None),
        "ghost": (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "dup": (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "": (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "bob": (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "few": (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
    }
    assert [(n, r["name"]) for n, r in records] == [("UserScramCredentialRecord", "alice")]
    image = _image_with(records)
    cred = image.scram.get(ScramMechanism.SCRAM_SHA_256, "alice")
    assert isinstance(cred, ScramCredential) and cred.iterations == 4096 and cred.salt == b"salt"
    # one user twice in a request; then a deletion of what exists
    mgr.image = image
    response, records = mgr.alter_credentials({"deletions": [], "upsertions": [_upsert("carl"), _upsert("carl", 2)]})
    assert response["results"] == [{"user": "carl", "error_code": Errors.DUPLICATE_RESOURCE,
                                    "error_message": "A user credential cannot be altered twice in the same request"}]
    response, records = mgr.alter_credentials({"deletions": [{"name": "alice", "mechanism": 1}], "upsertions": []})
    assert records == [("RemoveUserScramCredentialRecord", {"name": "alice", "mechanism": 1})]
    assert _image_with([("UserScramCredentialRecord", {"name": "alice", "mechanism": 1, "salt": b"s",
                                                       "stored_key": b"k", "server_key": b"v", "iterations": 4096}),
                        *records]).scram.get(ScramMechanism.SCRAM_SHA_256, "alice") is None


def test_describe_user_scram_credentials() -> None:
    image = _image_with([
        ("UserScramCredentialRecord", {"name": "a", "mechanism": 2, "salt": b"s", "stored_key": b"k",
                                       "server_key": b"v", "iterations": 8192}),
        ("UserScramCredentialRecord", {"name": "a", "mechanism": 1, "salt": b"s", "stored_key": b"k",
                                       "server_key": b"v", "iterations": 4096}),
    ])
    everyone = describe_credentials(image, {"users": None})["results"]
    assert everyone == [{"user": "a", "error_code": 0, "error_message": None,
                         "credential_infos": [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]}]
    named = describe_credentials(image, {"users": [{"name": "b"}, {"name": "a"}, {"name": "a"}]})["results"]
    assert [(r["user"], r["error_code"]) for r in named] == [("b", Errors.RESOURCE_NOT_FOUND),
                                                             ("a", Errors.DUPLICATE_RESOURCE)]


# -- the tools' SCRAM arguments ------------------------------------------------------------------


def test_add_scram_and_add_config_parsing() -> None:
    spec = parse_add_scram('SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]')
    assert (spec.mechanism, spec.name, spec.iterations, spec.salt, spec.salted_password) == (
        ScramMechanism.SCRAM_SHA_512, "alice", 8192, b"7q", b"`!")
    specs = parse_add_config('SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password="x,]y"]')
    assert [(s.mechanism, s.iterations) for s in specs] == [(ScramMechanism.SCRAM_SHA_256, 8192),
                                                            (ScramMechanism.SCRAM_SHA_512, 4096)]
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-256=[password=b]",
                "SCRAM-SHA-256=[name=a,password=b,iterations=100]", "SCRAM-SHA-256=[name=a]",
                "SCRAM-SHA-256=name=a", "SCRAM-SHA-256=[name=a,pw=b]"):
        with pytest.raises(ScramParseError):
            parse_add_scram(bad)
