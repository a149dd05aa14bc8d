"""Users and ownership (issue 14) without a server: the verifier of a request's credential (static tokens, HS256 JWT,
a JWKS served over HTTP) and the Python API's owner rules on SQLite and PostgreSQL. The same over `langgraph dev`
with two users is tests/test_auth_http.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cli_helpers import cli
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from personalab.graph.api import dialogue, knowledge, library
from personalab.graph.http.users import LOCAL_USER, Unauthenticated, verify
from personalab.nodes.rules.errors import ConfigError, InstanceNotFound, InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.settings import Settings
from personalab.stores.tables import Line
from sqlmodel import select

SECRET = "a-shared-secret-of-enough-length-0123456789"


def _settings(**values: Any) -> Settings:
    return Settings(**values)


def _hs256(claims: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode({"exp": int(time.time()) + 600, **claims}, secret, algorithm="HS256")


# ---- the verifier ----------------------------------------------------------------------------------------------


def test_without_auth_every_request_is_the_local_operator() -> None:
    assert verify(None, _settings()) == LOCAL_USER
    assert verify("Bearer whatever", _settings(auth="none")) == LOCAL_USER


def test_static_tokens_name_their_user_and_a_refusal_never_repeats_the_token() -> None:
    config = _settings(auth="tokens", auth_tokens="tok-a:alice, tok-b:bob")
    assert verify("Bearer tok-a", config) == "alice"
    assert verify("bearer  tok-b ", config) == "bob"
    for header, words in [
        (None, "missing Authorization"),
        ("", "missing Authorization"),
        ("tok-a", "not 'Bearer <token>'"),
        ("Basic tok-a", "not 'Bearer <token>'"),
        ("Bearer secret-guess-123", "unknown token"),
    ]:
        with pytest.raises(Unauthenticated, match=words) as refused:
            verify(header, config)
        assert "secret-guess-123" not in str(refused.value)


def test_a_bad_token_list_is_a_config_error_naming_the_pair_not_the_token() -> None:
    with pytest.raises(ConfigError, match="PERSONALAB_AUTH_TOKENS: pair 2") as bad:
        verify("Bearer tok-a", _settings(auth="tokens", auth_tokens="tok-a:alice,secret-without-user"))
    assert "secret-without-user" not in str(bad.value)
    with pytest.raises(ConfigError, match="PERSONALAB_AUTH_TOKENS"):
        verify("Bearer tok-a", _settings(auth="tokens"))
    with pytest.raises(ConfigError, match="PERSONALAB_AUTH"):
        _settings(auth="ldap")


def test_hs256_jwt_valid_expired_wrong_audience_issuer_secret_and_claims() -> None:
    config = _settings(auth="jwt", jwt_secret=SECRET, jwt_audience="personalab", jwt_issuer="https://id.example")
    good = {"sub": "alice", "aud": "personalab", "iss": "https://id.example"}
    assert verify(f"Bearer {_hs256(good)}", config) == "alice"
    cases = [
        (_hs256({**good, "exp": int(time.time()) - 60}), "expired"),
        (_hs256({**good, "aud": "another-app"}), "audience"),
        (_hs256({key: value for key, value in good.items() if key != "aud"}), "aud"),
        (_hs256({**good, "iss": "https://evil.example"}), "issuer"),
        (_hs256(good, secret="another-secret-of-enough-length-987654321"), "not valid"),
        (_hs256({"aud": "personalab", "iss": "https://id.example"}), "'sub'"),
        (_hs256({**good, "sub": "\x00"}), "does not name a user"),
        (jwt.encode({**good}, SECRET, algorithm="HS256"), "'exp'"),  # no expiry: refused
        ("not.a.jwt", "not valid"),
    ]
    for token, words in cases:
        with pytest.raises(Unauthenticated, match=words) as refused:
            verify(f"Bearer {token}", config)
        assert token not in str(refused.value)
    # the user may be another claim; without aud / iss configured they are not checked
    plain = _settings(auth="jwt", jwt_secret=SECRET, jwt_user_claim="email")
    assert verify(f"Bearer {_hs256({'email': 'bob@example.com'})}", plain) == "bob@example.com"
    with pytest.raises(ConfigError, match="PERSONALAB_JWT_SECRET or PERSONALAB_JWT_JWKS_URL"):
        verify(f"Bearer {_hs256(good)}", _settings(auth="jwt"))


@pytest.fixture
def jwks() -> Iterator[tuple[str, Any]]:
    """An identity provider's JWKS on 127.0.0.1 (one RSA key, kid "k1"); yields its URL and the private key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json", key
    finally:
        server.shutdown()
        server.server_close()


def test_rs256_jwt_checked_with_the_key_of_a_jwks_url(jwks: tuple[str, Any]) -> None:
    url, key = jwks
    config = _settings(auth="jwt", jwt_jwks_url=url, jwt_audience="personalab")
    claims = {"sub": "carol", "aud": "personalab", "exp": int(time.time()) + 600}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    assert verify(f"Bearer {token}", config) == "carol"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, other, algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(Unauthenticated, match="not valid"):
        verify(f"Bearer {forged}", config)
    unknown_kid = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k9"})
    with pytest.raises(Unauthenticated, match="not in the JWKS"):
        verify(f"Bearer {unknown_kid}", config)
    # an HS256 token signed with the public key's text (algorithm confusion) is refused
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(jwt.InvalidKeyError):  # PyJWT itself will not sign HS256 with a PEM key; forge it by hand
        jwt.encode(claims, pem, algorithm="HS256")
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    payload = jwt.utils.base64url_encode(json.dumps(claims).encode())
    signature = jwt.utils.base64url_encode(hmac.new(pem, header + b"." + payload, hashlib.sha256).digest())
    confused = b".".join((header, payload, signature)).decode()
    with pytest.raises(Unauthenticated):
        verify(f"Bearer {confused}", config)


# ---- the Python API's owner rules ------------------------------------------------------------------------------


def _library(db_url: str | None, owner: str | None, shared: bool = False) -> tuple[int, int]:
    character = library.create_character(
        {"name": f"{owner}的角色", "greetings": ["你好"], "shared": shared}, owner=owner, database_url=db_url
    )
    background = library.create_background(
        {"name": f"{owner}的背景", "outline": ["一"], "shared": shared}, owner=owner, database_url=db_url
    )
    return character.id, background.id


def test_a_user_sees_and_changes_only_their_own_plus_shared(db_url: str) -> None:
    a_char, a_back = _library(db_url, "alice")
    s_char, s_back = _library(db_url, "alice", shared=True)
    b_char, b_back = _library(db_url, "bob")
    a_inst = library.create_instance(
        {"character_id": a_char, "background_id": a_back}, owner="alice", database_url=db_url
    )
    assert a_inst.owner == "alice"

    assert [c.id for c in library.list_characters(owner="bob", database_url=db_url)] == [s_char, b_char]
    assert [b.id for b in library.list_backgrounds(owner="bob", database_url=db_url)] == [s_back, b_back]
    assert library.list_instances(owner="bob", database_url=db_url) == []
    assert len(library.list_characters(database_url=db_url)) == 3  # the operator sees everything
    assert [i.id for i in library.list_instances(database_url=db_url)] == [a_inst.id]

    for call in (
        lambda: library.get_character(a_char, owner="bob", database_url=db_url),
        lambda: library.character_avatar(a_char, owner="bob", database_url=db_url),
        lambda: library.edit_character(a_char, {"name": "x"}, owner="bob", database_url=db_url),
        lambda: library.delete_character(a_char, cascade=True, owner="bob", database_url=db_url),
        lambda: library.get_background(a_back, owner="bob", database_url=db_url),
        lambda: library.edit_background(a_back, {"name": "x"}, owner="bob", database_url=db_url),
        lambda: library.delete_background(a_back, cascade=True, owner="bob", database_url=db_url),
        lambda: library.create_instance(
            {"character_id": a_char, "background_id": b_back}, owner="bob", database_url=db_url
        ),
        lambda: library.create_instance(
            {"character_id": b_char, "background_id": a_back}, owner="bob", database_url=db_url
        ),
        lambda: library.get_instance(a_inst.id, owner="bob", database_url=db_url),
        lambda: library.rename_instance(a_inst.id, "x", owner="bob", database_url=db_url),
        lambda: library.delete_instance(a_inst.id, owner="bob", database_url=db_url),
        lambda: library.export_instance_data(a_inst.id, owner="bob", database_url=db_url),
    ):
        with pytest.raises(NotFound, match="does not exist") as refused:
            call()
        assert (
            str(a_char) in str(refused.value)
            or str(a_back) in str(refused.value)
            or str(a_inst.id) in str(refused.value)
        )
    with pytest.raises(InstanceNotFound):
        library.check_instance(a_inst.id, owner="bob", database_url=db_url)

    # shared: bob reads it and starts an instance with it, but does not change or delete it
    assert library.get_character(s_char, owner="bob", database_url=db_url).shared
    b_inst = library.create_instance(
        {"character_id": s_char, "background_id": s_back}, owner="bob", database_url=db_url
    )
    with pytest.raises(NotFound, match="only its owner can change it"):
        library.edit_character(s_char, {"name": "x"}, owner="bob", database_url=db_url)
    with pytest.raises(NotFound, match="only its owner can change it"):
        library.delete_background(s_back, owner="bob", database_url=db_url)
    # alice sees only her own instances of her shared character, and cannot delete it from under bob's
    assert library.get_character(s_char, owner="alice", database_url=db_url).instances == []
    assert library.get_character(s_char, owner="bob", database_url=db_url).instances == [b_inst.id]
    with pytest.raises(library.InUse, match="1 instance"):
        library.delete_character(s_char, cascade=True, owner="alice", database_url=db_url)
    library.check_instance(b_inst.id, owner="bob", database_url=db_url)
    # unshared, bob no longer sees it (his instance of it stays his)
    library.edit_character(s_char, {"shared": False}, owner="alice", database_url=db_url)
    library.edit_background(s_back, {"shared": False}, owner="alice", database_url=db_url)
    assert [c.id for c in library.list_characters(owner="bob", database_url=db_url)] == [b_char]
    with pytest.raises(NotFound, match=f"background {s_back}"):
        library.get_background(s_back, owner="bob", database_url=db_url)
    assert library.get_instance(b_inst.id, owner="bob", database_url=db_url).character_id == s_char
    # nothing of alice's changed
    assert library.get_character(a_char, database_url=db_url).name == "alice的角色"
    assert library.get_instance(a_inst.id, owner="alice", database_url=db_url).title == "alice的角色 · alice的背景"


def test_an_import_is_its_users_and_reuses_only_what_they_see(db_url: str) -> None:
    a_char, a_back = _library(db_url, "alice")
    a_inst = library.create_instance(
        {"character_id": a_char, "background_id": a_back}, owner="alice", database_url=db_url
    )
    document = library.export_instance_data(a_inst.id, owner="alice", database_url=db_url)
    mine = library.import_instance_data(document, owner="alice", database_url=db_url)
    assert not mine.character_created and mine.instance.owner == "alice"
    theirs = library.import_instance_data(document, owner="bob", database_url=db_url)
    assert theirs.character_created and theirs.background_created and theirs.instance.owner == "bob"
    copied = library.get_character(theirs.instance.character_id or 0, owner="bob", database_url=db_url)
    assert copied.owner == "bob" and copied.id != a_char
    # a file's link to another of alice's characters does not tie bob's rows to it (the operator's import keeps it)
    other = library.create_character({"name": "另一个"}, owner="alice", database_url=db_url)
    assert document["tables"]["line"], document["tables"]
    for line in document["tables"]["line"]:
        line["role_id"] = other.id
    linked = library.import_instance_data(document, owner="bob", database_url=db_url)
    kept = library.import_instance_data(document, database_url=db_url)
    with session_scope(db_url) as session:
        lines = {
            save_id: session.exec(select(Line.role_id).where(Line.save_id == save_id)).all()
            for save_id in (linked.instance.id, kept.instance.id)
        }
    assert lines[linked.instance.id] == [None] and lines[kept.instance.id] == [other.id]


def test_knowledge_scopes_belong_to_their_character_or_instance(db_url: str) -> None:
    a_char, a_back = _library(db_url, "alice")
    a_inst = library.create_instance(
        {"character_id": a_char, "background_id": a_back}, owner="alice", database_url=db_url
    )
    entry = knowledge.add_knowledge_entry("地理", "北方有山", instance_id=a_inst.id, database_url=db_url)
    knowledge.check_scope_owner("alice", instance_id=a_inst.id, change=True, database_url=db_url)
    knowledge.check_entry_owner(entry["id"], "alice", change=True, database_url=db_url)
    with pytest.raises(InstanceNotFound, match=str(a_inst.id)):
        knowledge.check_scope_owner("bob", instance_id=a_inst.id, database_url=db_url)
    with pytest.raises(NotFound, match=f"character {a_char}"):
        knowledge.check_scope_owner("bob", character_id=a_char, database_url=db_url)
    with pytest.raises(NotFound, match=f"knowledge entry {entry['id']}"):
        knowledge.check_entry_owner(entry["id"], "bob", database_url=db_url)
    with pytest.raises(InvalidInput, match="character_id or instance_id"):
        knowledge.check_scope_owner("bob", database_url=db_url)
    global_entry = knowledge.add_knowledge_entry("常识", "水往低处流", database_url=db_url)
    with pytest.raises(NotFound):
        knowledge.check_entry_owner(global_entry["id"], "alice", database_url=db_url)
    knowledge.check_entry_owner(global_entry["id"], None, change=True, database_url=db_url)  # the operator's
    # the API functions themselves take the owner
    assert knowledge.get_knowledge_entry(entry["id"], owner="alice", database_url=db_url)["content"] == "北方有山"
    for call in (
        lambda: knowledge.get_knowledge_entry(entry["id"], owner="bob", database_url=db_url),
        lambda: knowledge.edit_knowledge(entry["id"], owner="bob", database_url=db_url, content="改"),
        lambda: knowledge.tag_knowledge(entry["id"], add=["x"], owner="bob", database_url=db_url),
        lambda: knowledge.delete_knowledge_entry(entry["id"], owner="bob", database_url=db_url),
        lambda: knowledge.list_knowledge_entries(instance_id=a_inst.id, owner="bob", database_url=db_url),
        lambda: knowledge.add_knowledge_entry("t", "c", instance_id=a_inst.id, owner="bob", database_url=db_url),
        lambda: knowledge.worldbook_settings(instance_id=a_inst.id, owner="bob", database_url=db_url),
        lambda: knowledge.update_worldbook_settings(
            {"scan_depth": 2}, instance_id=a_inst.id, owner="bob", database_url=db_url
        ),
        lambda: dialogue.history(a_inst.id, owner="bob", database_url=db_url),
        lambda: dialogue.sessions(a_inst.id, owner="bob", database_url=db_url),
        lambda: dialogue.new_session(a_inst.id, owner="bob", database_url=db_url),
        lambda: dialogue.story_state(a_inst.id, owner="bob", database_url=db_url),
        lambda: dialogue.regenerate_target(a_inst.id, owner="bob", database_url=db_url),
    ):
        with pytest.raises(NotFound):
            call()
    assert knowledge.get_knowledge_entry(entry["id"], database_url=db_url)["content"] == "北方有山"
    assert len(dialogue.sessions(a_inst.id, owner="alice", database_url=db_url)) <= 1
    assert dialogue.history(a_inst.id, owner="alice", database_url=db_url)["total"] == 1  # the greeting


def test_the_cli_is_the_operator_and_lists_one_users_view_with_owner(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_char, a_back = _library(None, "alice")
    s_char, _ = _library(None, "alice", shared=True)
    instance = library.create_instance({"character_id": a_char, "background_id": a_back}, owner="alice")
    code, out, _ = cli(capsys, "instance", "list", "--json")
    assert code == 0 and [item["id"] for item in json.loads(out)] == [instance.id]
    code, out, _ = cli(capsys, "instance", "list", "--owner", "bob", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = cli(capsys, "character", "list", "--owner", "bob", "--json")
    assert code == 0 and [item["id"] for item in json.loads(out)] == [s_char]
    code, out, _ = cli(capsys, "background", "list", "--owner", "alice", "--json")
    assert code == 0 and len(json.loads(out)) == 2
