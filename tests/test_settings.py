"""The settings (stores/settings.py): every PERSONALAB_* variable's default, a bad value of each kind as one
`ConfigError` line naming the variable, the value and what is allowed, fresh reads, the run-time context's
schema, and the CLI's one-line exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest
from personalab.nodes.context import Context
from personalab.nodes.rules import prompts
from personalab.nodes.rules.errors import ConfigError
from personalab.stores.settings import ENV_NAMES, Settings, env_name, settings, settings_table

ROOT = Path(__file__).resolve().parents[1]

DEFAULTS: dict[str, object] = {
    "PERSONALAB_DATA_DIR": "./data",
    "PERSONALAB_DATABASE_URL": None,
    "PERSONALAB_CHROMA_HOST": None,
    "PERSONALAB_CHROMA_PORT": 8000,
    "PERSONALAB_EMBEDDINGS": "offline",
    "PERSONALAB_EMBEDDING_MODEL": "text-embedding-3-small",
    "PERSONALAB_BLAS_THREADS": 1,
    "PERSONALAB_RELEASE_MEMORY_EVERY_S": 30.0,
    "PERSONALAB_LLM": "auto",
    "PERSONALAB_MODEL": "gpt-4o-mini",
    "PERSONALAB_MODEL_REPLY": None,
    "PERSONALAB_MODEL_QUERY_REWRITE": None,
    "PERSONALAB_MODEL_CORE_MEMORY": None,
    "PERSONALAB_MODEL_REVIEW": None,
    "PERSONALAB_MODEL_EVENT_SUMMARY": None,
    "PERSONALAB_TEMPERATURE": None,
    "PERSONALAB_LLM_TIMEOUT": 30.0,
    "PERSONALAB_LLM_MAX_RETRIES": 0,
    "PERSONALAB_CONTEXT_TOKENS": 128000,
    "PERSONALAB_MAX_REPLY_TOKENS": 1024,
    "PERSONALAB_TURN_DEADLINE": 30.0,
    "OPENAI_API_KEY": None,
    "OPENAI_BASE_URL": None,
    "PERSONALAB_MAINTENANCE_EVERY": 10,
    "PERSONALAB_STALL_TURNS": 3,
    "PERSONALAB_RAG_RESULTS": 20,
    "PERSONALAB_RAG_TIMEOUT": 1.5,
    "PERSONALAB_REWRITE_MESSAGES": 8,
    "PERSONALAB_MAX_MESSAGE_CHARS": 4000,
    "PERSONALAB_MAX_USER_NAME_CHARS": 64,
    "PERSONALAB_MAX_HOST_LINES": 50,
    "PERSONALAB_MAX_REPLY_CHARS": 8000,
    "PERSONALAB_PROGRESS_MAX_STEP": 1,
    "PERSONALAB_DIRECTOR_REFERENCE_FLOOR": 0.25,
    "PERSONALAB_TURN_LEASE": 30.0,
    "PERSONALAB_SESSION_PAUSE": 30.0,
    "PERSONALAB_HEAD_TOKENS": 4000,
    "PERSONALAB_MIDDLE_TOKENS": 28000,
    "PERSONALAB_RETRIEVED_TOKENS": 8000,
    "PERSONALAB_TAIL_TOKENS": 4000,
    "PERSONALAB_CHARS_PER_TOKEN": 1.5,
    "PERSONALAB_TOKENIZER": "",
    "PERSONALAB_SQLITE_BUSY_TIMEOUT": 30.0,
    "PERSONALAB_FAILPOINT": "",
    "PERSONALAB_FAILPOINT_ACTION": "kill",
    "PERSONALAB_RECALL_TURNS": 20,
    "PERSONALAB_RECALL_STEP": 1,
    "PERSONALAB_MEMORY_STAYS": 0,
    "PERSONALAB_CONSOLIDATION": True,
    "PERSONALAB_QUERY_REWRITE": "auto",
    "PERSONALAB_ECHO_RETRY": True,
    "PERSONALAB_MEMORY_MODE": "full",
    "PERSONALAB_REVIEW_MODE": "rule",
    "PERSONALAB_AUTH": "none",
    "PERSONALAB_AUTH_TOKENS": None,
    "PERSONALAB_JWT_SECRET": None,
    "PERSONALAB_JWT_JWKS_URL": None,
    "PERSONALAB_JWT_AUDIENCE": None,
    "PERSONALAB_JWT_ISSUER": None,
    "PERSONALAB_JWT_USER_CLAIM": "sub",
}


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PersonaLab variable set: every setting at its default."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


def test_every_variable_the_project_reads_is_a_setting_with_its_default(unset: None) -> None:
    assert set(ENV_NAMES) == set(DEFAULTS)
    current = settings()
    assert {env_name(field): getattr(current, field) for field in Settings.model_fields} == DEFAULTS


def test_every_setting_is_described() -> None:
    for field, info in Settings.model_fields.items():
        assert info.description and len(info.description) > 20, field


def test_each_purpose_of_the_model_factory_can_have_its_own_model() -> None:
    assert {f"model_{purpose}" for purpose in prompts.PURPOSES} <= set(Settings.model_fields)


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("PERSONALAB_CHROMA_PORT", "abc", "a whole number from 1 to 65535"),  # port
        ("PERSONALAB_CHROMA_PORT", "70000", "a whole number from 1 to 65535"),
        ("PERSONALAB_RAG_TIMEOUT", "soon", "a number, at least 0.01"),  # number
        ("PERSONALAB_TURN_LEASE", "inf", "a number, at least 1"),
        ("PERSONALAB_TEMPERATURE", "2.5", "a number from 0 to 2"),  # range
        ("PERSONALAB_TEMPERATURE", "nan", "a number from 0 to 2"),
        ("PERSONALAB_LLM_TIMEOUT", "0", "a number above 0"),
        ("PERSONALAB_MAINTENANCE_EVERY", "0", "a whole number, at least 1"),
        ("PERSONALAB_RELEASE_MEMORY_EVERY_S", "-1", "a number, at least 0"),
        ("PERSONALAB_LLM_MAX_RETRIES", "2.0", "a whole number, at least 0"),  # whole numbers are written whole
        ("PERSONALAB_REVIEW_MODE", "sometimes", "'rule' or 'llm'"),  # choice
        ("PERSONALAB_LLM", "magic", "one of 'auto', 'scripted', 'openai'"),
        ("PERSONALAB_EMBEDDINGS", "bert", "one of 'offline', 'e5', 'fused', 'openai'"),
        ("OPENAI_BASE_URL", "localhost:8000/v1", "an http(s) URL such as http://127.0.0.1:11434/v1"),  # URL
        ("OPENAI_BASE_URL", "ftp://example.com/v1", "an http(s) URL such as http://127.0.0.1:11434/v1"),
        ("PERSONALAB_DATABASE_URL", "mysql://db/personalab", "a sqlite:/// or postgresql:// URL"),
    ],
)
def test_a_bad_value_is_one_config_error_line_naming_variable_value_and_allowed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, allowed: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        settings()
    assert str(raised.value) == f"{name}={value!r}: expected {allowed}"


def test_every_bounded_setting_refuses_a_value_below_its_bound(unset: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for field, info in Settings.model_fields.items():
        low = next((getattr(m, key) for m in info.metadata for key in ("ge", "gt") if hasattr(m, key)), None)
        if low is None:
            continue
        name = env_name(field)
        monkeypatch.setenv(name, str(low - 1))
        with pytest.raises(ConfigError, match=f"^{name}="):
            settings()
        monkeypatch.delenv(name)


def test_two_bad_values_are_named_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_STALL_TURNS", "x")
    monkeypatch.setenv("PERSONALAB_RAG_RESULTS", "0")
    with pytest.raises(ConfigError) as raised:
        settings()
    message = str(raised.value)
    assert "\n" not in message and "PERSONALAB_STALL_TURNS='x'" in message and "PERSONALAB_RAG_RESULTS='0'" in message


def test_blank_is_unset_spaces_are_trimmed_and_choices_ignore_case(
    unset: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_STALL_TURNS", "  ")
    monkeypatch.setenv("PERSONALAB_MODEL", "")
    monkeypatch.setenv("PERSONALAB_RAG_RESULTS", " 12 ")
    monkeypatch.setenv("PERSONALAB_LLM", " Scripted ")
    current = settings()
    assert (current.stall_turns, current.model, current.rag_results, current.llm) == (3, "gpt-4o-mini", 12, "scripted")


def test_a_changed_variable_is_read_at_the_next_call(unset: None, monkeypatch: pytest.MonkeyPatch) -> None:
    first = settings()
    assert settings() is first  # nothing changed: built once
    monkeypatch.setenv("PERSONALAB_STALL_TURNS", "7")
    assert settings().stall_turns == 7
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    assert settings().openai_api_key is not None and "sk-secret" not in repr(settings())
    monkeypatch.delenv("PERSONALAB_STALL_TURNS")
    assert settings().stall_turns == 3


def test_the_context_takes_its_defaults_from_the_settings(unset: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Context().maintenance_every == 10 and Context().review_mode == "rule"
    monkeypatch.setenv("PERSONALAB_TURN_LEASE", "30")
    monkeypatch.setenv("PERSONALAB_REVIEW_MODE", "LLM")
    ctx = Context(maintenance_every=2)
    assert (ctx.lock_lease_s, ctx.review_mode, ctx.maintenance_every) == (30.0, "llm", 2)
    monkeypatch.setenv("PERSONALAB_HEAD_TOKENS", "many")
    with pytest.raises(ConfigError, match="^PERSONALAB_HEAD_TOKENS='many': expected a whole number, at least 1$"):
        Context()


def test_the_served_graph_context_schema_describes_every_field() -> None:
    from personalab.graph.graph import graph

    schema = graph.get_context_jsonschema()
    assert schema is not None
    properties = schema["properties"]
    assert set(properties) == {f.name for f in fields(Context)}
    for name, prop in properties.items():
        assert prop.get("type") or prop.get("anyOf") or prop.get("enum"), name
        assert "Default: PERSONALAB_" in prop["description"], name
    assert properties["review_mode"]["enum"] == ["rule", "llm"]
    assert properties["maintenance_every"]["minimum"] == 1
    hints = typing.get_type_hints(Context)  # the annotations resolve (LangGraph reads them)
    assert set(hints) == set(properties)


def test_settings_table_has_one_row_per_variable() -> None:
    table = settings_table()
    rows = table.splitlines()
    assert rows[0] == "| variable | meaning | default |" and len(rows) == 2 + len(ENV_NAMES)
    for name, row in zip(ENV_NAMES, rows[2:], strict=True):
        assert row.startswith(f"| `{name}` | ") and row.count(" | ") == 2
    assert "| `PERSONALAB_CHROMA_PORT` | Port of the Chroma server" in table
    assert "Allowed: a whole number from 1 to 65535. | `8000` |" in table


def _clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ENV_NAMES and key != "OPENBLAS_NUM_THREADS"}
    return {**env, **extra}


def test_the_blas_threads_are_set_before_numpy_without_loading_the_settings() -> None:
    """stores.blas reads its variable in every package's __init__, before NumPy, without loading pydantic-settings
    (which would cost every command, `personalab --help` too, its import)."""
    code = (
        "import sys, os, personalab.stores.blas; "
        "print('numpy' in sys.modules, 'personalab.stores.settings' in sys.modules, os.environ['OPENBLAS_NUM_THREADS'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_clean_env(PERSONALAB_BLAS_THREADS="3"),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False", "False", "3"]


def test_the_cli_reports_a_bad_variable_in_one_line_and_exits_2(tmp_path: Path) -> None:
    cli = Path(sys.executable).with_name("personalab")
    done = subprocess.run(
        [str(cli), "instance", "create", "--sample"],
        cwd=tmp_path,
        env=_clean_env(PERSONALAB_DATA_DIR=str(tmp_path), PERSONALAB_CHROMA_PORT="abc"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == ("personalab: error: PERSONALAB_CHROMA_PORT='abc': expected a whole number from 1 to 65535\n")


def test_configuration_table_is_the_settings_table() -> None:
    """docs/configuration.md's table is produced from the settings model, so the documentation cannot drift from the
    code."""
    assert settings_table().strip() in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
