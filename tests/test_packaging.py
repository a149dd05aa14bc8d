"""PersonaLab as a host app installs and uses it: one `personalab.*` namespace, next to the host's own `graph.py`,
`nodes/` and `state.py`; the import floors' contracts cover every module; the product never loads the evaluations."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HOST_SCRIPT = """
import graph, nodes, state  # the host app's own modules, found first on its path
assert graph.NAME == "host graph" and nodes.NAME == "host nodes" and state.NAME == "host state"
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
import personalab.graph.graph as turn_graph_module
assert "site-packages" in turn_graph_module.__file__, turn_graph_module.__file__  # the installed wheel, not the checkout
instance = create_sample_instance()
with turn_graph(Context()) as (compiled, ctx):
    state = run_turn(compiled, ctx, instance, "你好，雷娜。")
flush_event_writes()
assert state["error"] is None and state["reply"], state
print("host turn ok", instance)
"""


@pytest.fixture(scope="module")
def installed_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the project's wheel installed as a user would (`pip install`); its
    dependencies come from this environment's site-packages (no network), the project itself only from the wheel."""
    base = tmp_path_factory.mktemp("install")
    wheels = base / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("personalab-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    # the dependencies, after the new environment's own site-packages; `.pth` files there are not run, so this
    # environment's editable install of the checkout is not seen
    Path(site, "host_deps.pth").write_text(deps + "\n", encoding="utf-8")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return venv


def test_the_wheel_installs_one_namespace_with_the_samples(installed_venv: Path) -> None:
    python = installed_venv / "bin" / "python"
    listing = subprocess.run(
        [str(python), "-m", "pip", "show", "-f", "personalab"], check=True, capture_output=True, text=True
    ).stdout
    files = [line.strip() for line in listing.splitlines() if line.startswith("  ")]
    assert "personalab/graph/samples/wasteland.json" in files
    # `personalab eval run shipped` plays the shipped scenarios, each in a `personalab.evals.worker` process
    assert {
        "personalab/evals/scenarios/long_horizon_facts.yaml",
        "personalab/evals/scenarios/scenario.schema.json",
    } <= set(files)
    assert "personalab/evals/worker.py" in files
    assert all(f.startswith(("personalab/", "personalab-", "../")) for f in files), files
    assert not any(f.startswith(("graph/", "nodes/", "stores/", "evals/", "tests/")) for f in files)


def test_a_host_app_with_its_own_graph_nodes_and_state_plays_a_turn(installed_venv: Path, tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "nodes").mkdir(parents=True)
    (host / "graph.py").write_text('NAME = "host graph"\n', encoding="utf-8")
    (host / "nodes" / "__init__.py").write_text('NAME = "host nodes"\n', encoding="utf-8")
    (host / "state.py").write_text('NAME = "host state"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PERSONALAB_"))}
    env["PERSONALAB_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = str(host)
    result = subprocess.run(
        [str(installed_venv / "bin" / "python"), "-c", HOST_SCRIPT],
        cwd=host,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "host turn ok" in result.stdout
    # the installed console script works from the host's folder too
    cli = subprocess.run(
        [str(installed_venv / "bin" / "personalab"), "instance", "create", "--sample"],
        cwd=host,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0 and cli.stdout.strip().isdigit(), cli.stderr[-3000:]


def test_the_product_command_never_loads_the_evaluations() -> None:
    code = "import sys, personalab.graph.cli; print(sorted(m for m in sys.modules if m.startswith('personalab.evals')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "[]"


def _contract_modules(config: configparser.ConfigParser, section: str, key: str) -> set[str]:
    return {line.strip() for line in config[section][key].splitlines() if line.strip()}


def test_the_import_contracts_name_every_node_module() -> None:
    """A node module added without being named in `.importlinter` would escape the floors' checks."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter", encoding="utf-8")
    modules = {f"personalab.nodes.{p.stem}" for p in (ROOT / "nodes").glob("*.py") if p.stem != "__init__"}
    forbidden = _contract_modules(config, "importlinter:contract:rules-are-pure", "forbidden_modules")
    assert modules <= forbidden, f"not forbidden to nodes.rules: {sorted(modules - forbidden)}"
    # the one door (issue 23): the front ends reach no node module and no store, only the API
    door = _contract_modules(config, "importlinter:contract:one-door", "forbidden_modules")
    assert modules | {"personalab.stores"} <= door, f"open to the front ends: {sorted(modules - door)}"
    assert {"sqlmodel", "sqlalchemy", "chromadb", "psycopg", "httpx"} <= door & forbidden
    peers = _contract_modules(config, "importlinter:contract:nodes-are-peers", "modules")
    # what the nodes stand on (LAYOUT.md); every other module of nodes/ is a node and a peer
    foundations = {f"personalab.nodes.{m}" for m in ("state", "context", "llm", "scripted_llm", "story_search")}
    assert modules - foundations == peers
