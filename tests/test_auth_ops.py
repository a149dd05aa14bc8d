"""Auth details found when PersonaLab was tried as an operator would (issue 27): a JWT user claim with spaces
around the name is not that user, a time claim given as a string is refused, `/metrics` needs a token when auth is
on, and two servers of two data folders started from one folder do not share `langgraph dev`'s thread records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from personalab.evals.served import graph_server
from personalab.graph.http.guards import DevRoutesGuard
from personalab.graph.http.users import Unauthenticated, verify
from personalab.nodes.rules.errors import ConfigError
from personalab.stores.server_records import RECORDS, claim_server_records
from personalab.stores.settings import Settings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parents[1]
SECRET = "a-shared-secret-of-enough-length-0123456789"
JWT = Settings(auth="jwt", jwt_secret=SECRET)


def _token(**claims: Any) -> str:
    return jwt.encode({"exp": int(time.time()) + 600, "sub": "alice", **claims}, SECRET, algorithm="HS256")


def test_a_sub_with_spaces_around_the_name_is_refused_naming_sub() -> None:
    assert verify(f"Bearer {_token()}", JWT) == "alice"
    for sub in (" alice", "alice ", "\talice"):
        with pytest.raises(Unauthenticated, match="'sub'"):
            verify(f"Bearer {_token(sub=sub)}", JWT)


def test_a_time_claim_given_as_a_string_is_refused() -> None:
    later = int(time.time()) + 600
    for claim, value in (("exp", str(later)), ("nbf", "0"), ("iat", str(int(time.time())))):
        with pytest.raises(Unauthenticated, match=f"'{claim}'"):
            verify(f"Bearer {_token(**{claim: value})}", JWT)
    assert verify(f"Bearer {_token(exp=later + 0.5, iat=int(time.time()))}", JWT) == "alice"


def _metrics_app() -> TestClient:
    async def metrics(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("lg_api_num_running_runs 0")

    return TestClient(DevRoutesGuard(Starlette(routes=[Route("/metrics", metrics)])))  # type: ignore[arg-type]


def test_metrics_needs_a_token_when_auth_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_AUTH", "tokens")
    monkeypatch.setenv("PERSONALAB_AUTH_TOKENS", "tok-alice-1:alice")
    client = _metrics_app()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and "Authorization" in refused.json()["detail"]
    forged = client.get("/metrics", headers={"Authorization": "Bearer tok-forged"})
    assert forged.status_code == 401 and "tok-forged" not in forged.text
    assert client.get("/metrics", headers={"Authorization": "Bearer tok-alice-1"}).text.startswith("lg_api")
    monkeypatch.setenv("PERSONALAB_AUTH", "none")
    assert _metrics_app().get("/metrics").status_code == 200  # the local operator's server, as before


def test_one_records_folder_serves_one_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "server"
    monkeypatch.delenv("PERSONALAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(tmp_path / "a"))
    assert claim_server_records(here) == here / RECORDS
    assert claim_server_records(here) == here / RECORDS  # the same data folder again: its own records
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(tmp_path / "b"))
    with pytest.raises(ConfigError, match="another data folder") as refused:
        claim_server_records(here)
    assert str(tmp_path / "b" / "server") in str(refused.value)
    claim_server_records(tmp_path / "b" / "server")  # from a folder of its own it starts


def test_a_second_data_folders_server_started_from_the_same_folder_refuses_to_start(tmp_path: Path) -> None:
    workdir = tmp_path / "server"
    settings = {"PERSONALAB_LLM": "scripted"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with graph_server(REPO, workdir, {**settings, "PERSONALAB_DATA_DIR": str(tmp_path / "a")}, inherit_settings=False):
        pass
    with pytest.raises(RuntimeError, match="exited"):
        with graph_server(
            REPO, workdir, {**settings, "PERSONALAB_DATA_DIR": str(tmp_path / "b")}, inherit_settings=False
        ):
            pass
    assert "holds the thread records of the server of another data folder" in (workdir / "server.log").read_text()
