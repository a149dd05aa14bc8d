"""Who is calling (issue 14, auth and ownership): the verifier of a request's bearer credential, chosen by
`PERSONALAB_AUTH`, and the signed-in user of a request to PersonaLab's own routes.

- `none` (the default: local use, the CLI, the demo): no credential is asked for; every request is the local
  operator, who owns and sees everything, as before users existed (`owner` None everywhere).
- `tokens`: `Authorization: Bearer <token>` with a token of `PERSONALAB_AUTH_TOKENS` (`tok-a:alice,tok-b:bob`), for
  development and tests.
- `jwt`: `Authorization: Bearer <JWT>` signed with `PERSONALAB_JWT_SECRET` (HS256) or by a key of
  `PERSONALAB_JWT_JWKS_URL` (RS256 / ES256); it must carry `exp`, and `aud` / `iss` when they are configured; the
  user is its `PERSONALAB_JWT_USER_CLAIM` (`sub`).

A refused credential is `Unauthenticated` whose message says why in words and never repeats the credential (the
server may log it). The LangGraph server calls `verify` through graph/http/auth.py for its own routes; the routes of
the mounted app call it through `request_owner`.
"""

from __future__ import annotations

import hmac
import re
from functools import lru_cache
from typing import Annotated, Any

import jwt
from fastapi import Depends, HTTPException, Request
from personalab.graph.api.support import Settings, settings
from personalab.nodes.rules.errors import ConfigError, PersonaLabError

LOCAL_USER = "local"
"""The identity of every request when `PERSONALAB_AUTH=none` (its `owner` is None: the operator's)."""
MAX_USER_CHARS = 200
JWKS_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]
NUMERIC_CLAIMS = ("exp", "nbf", "iat")
"""A JWT's time claims: JSON numbers of seconds (RFC 7519 NumericDate), never strings."""
_USER = re.compile(r"^[^\x00-\x1f\x7f]+$")


class Unauthenticated(PersonaLabError):
    """The request's credential is missing or refused (HTTP 401); the message never contains the credential."""


def auth_enabled(config: Settings | None = None) -> bool:
    return (config or settings()).auth != "none"


def auth_mode(config: Settings | None = None) -> str:
    """`PERSONALAB_AUTH`: none, tokens or jwt (what the sign-in page asks for)."""
    return str((config or settings()).auth)


def bearer(authorization: str | None) -> str:
    """The credential of an `Authorization: Bearer …` header."""
    if not authorization or not authorization.strip():
        raise Unauthenticated("missing Authorization header (Bearer token)")
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise Unauthenticated("the Authorization header is not 'Bearer <token>'")
    return credential.strip()


def _user(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_USER_CHARS or not _USER.match(value):
        raise Unauthenticated(f"{where} does not name a user")
    if value != value.strip():
        # " alice" is not alice: a trimmed name would let an issuer's other subject act as her (issue 27)
        raise Unauthenticated(f"{where} does not name a user (it has spaces around the name)")
    return value


@lru_cache(maxsize=8)
def _token_users(spec: str) -> dict[str, str]:
    """`token:user,token:user` as {token: user}; `ConfigError` naming the pair by its position (not its token)."""
    users: dict[str, str] = {}
    for number, pair in enumerate(spec.split(","), start=1):
        token, sep, user = pair.strip().rpartition(":")
        if not sep or not token.strip() or not user.strip():
            raise ConfigError(f"PERSONALAB_AUTH_TOKENS: pair {number} is not token:user")
        users[token.strip()] = user.strip()
    return users


def verify_token(credential: str, config: Settings) -> str:
    """The user of a static token (`PERSONALAB_AUTH=tokens`); compared in constant time."""
    if config.auth_tokens is None:
        raise ConfigError("PERSONALAB_AUTH=tokens needs PERSONALAB_AUTH_TOKENS (token:user pairs)")
    found = None
    for token, user in _token_users(config.auth_tokens.get_secret_value()).items():
        if hmac.compare_digest(token.encode("utf-8"), credential.encode("utf-8")):
            found = user
    if found is None:
        raise Unauthenticated("unknown token")
    return _user(found, "the token")


@lru_cache(maxsize=4)
def _jwks_client(url: str) -> jwt.PyJWKClient:
    return jwt.PyJWKClient(url, cache_keys=True, timeout=10)


def verify_jwt(credential: str, config: Settings) -> str:
    """The user of a JWT (`PERSONALAB_AUTH=jwt`): signature, `exp`, and `aud` / `iss` when configured."""
    options: jwt.types.Options = {"require": ["exp", config.jwt_user_claim]}
    try:
        if config.jwt_jwks_url:
            key: Any = _jwks_client(config.jwt_jwks_url).get_signing_key_from_jwt(credential).key
            algorithms = JWKS_ALGORITHMS
        elif config.jwt_secret is not None:
            key, algorithms = config.jwt_secret.get_secret_value(), ["HS256"]
        else:
            raise ConfigError("PERSONALAB_AUTH=jwt needs PERSONALAB_JWT_SECRET or PERSONALAB_JWT_JWKS_URL")
        claims = jwt.decode(
            credential,
            key,
            algorithms=algorithms,
            audience=config.jwt_audience,
            issuer=config.jwt_issuer,
            options=options,
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("the token is not for this audience (aud)") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("the token is not from the expected issuer (iss)") from None
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthenticated(f"the token lacks the claim {exc.claim!r}") from None
    except jwt.PyJWKClientError:
        raise Unauthenticated("the token's signing key is not in the JWKS") from None
    except jwt.InvalidTokenError:
        raise Unauthenticated("the token is not valid (signature or format)") from None
    for claim in NUMERIC_CLAIMS:
        # PyJWT reads int("9999999999") too: a time claim that is not a JSON number is refused (RFC 7519 NumericDate)
        value = claims.get(claim)
        if claim in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise Unauthenticated(f"the token's claim {claim!r} is not a number (NumericDate)")
    return _user(claims.get(config.jwt_user_claim), f"the token's claim {config.jwt_user_claim!r}")


def verify(authorization: str | None, config: Settings | None = None) -> str:
    """The user a request's `Authorization` header proves, by `PERSONALAB_AUTH`; `LOCAL_USER` without auth."""
    config = config or settings()
    if config.auth == "none":
        return LOCAL_USER
    credential = bearer(authorization)
    if config.auth == "tokens":
        return verify_token(credential, config)
    return verify_jwt(credential, config)


def request_owner(request: Request) -> str | None:
    """The owner a route of the mounted app acts for: the user the request's `Authorization` header proves, or None
    (the operator) without auth; 401 naming what is wrong (never the credential). The routes verify it themselves,
    with the verifier the server's auth uses: LangGraph's `enable_custom_route_auth` cannot wrap routers included
    in the app (it needs every route to have an `app`)."""
    if not auth_enabled():
        return None
    try:
        return verify(request.headers.get("authorization"))
    except Unauthenticated as exc:
        raise HTTPException(status_code=401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}) from None
    except ConfigError as exc:  # the server's auth settings are wrong: not the client's fault (no secret in it)
        raise HTTPException(status_code=500, detail=str(exc)) from None


Owner = Annotated[str | None, Depends(request_owner)]
"""A route's parameter: the owner it acts for (see `request_owner`)."""
