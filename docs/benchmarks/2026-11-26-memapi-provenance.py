"""The cost of the provenance record per turn (issue 23): its build and its insert + flush in the reply's transaction,
over N turns of the offline scripted model with 200 memories. `URL=postgresql://… python this.py 20` for PostgreSQL;
SQLite in a temporary data folder otherwise."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

folder = tempfile.mkdtemp()
os.environ["PERSONALAB_DATA_DIR"] = folder
url = os.environ.get("URL") or f"sqlite:///{folder}/bench.db"

from personalab.graph.runner import create_sample_instance, run_turn, turn_graph  # noqa: E402
from personalab.nodes import write_back  # noqa: E402
from personalab.nodes.context import Context  # noqa: E402
from personalab.stores.memory import MemoryStore  # noqa: E402

record, build = write_back.record_provenance, write_back.reply_provenance
inserts: list[float] = []
builds: list[float] = []
sizes: list[int] = []


def timed_record(session: Any, *args: Any) -> None:
    start = time.perf_counter()
    record(session, *args)
    session.flush()  # the row goes to the database inside the reply's transaction
    inserts.append((time.perf_counter() - start) * 1000)
    sizes.append(len(json.dumps(args[-1], ensure_ascii=False).encode()))


def timed_build(state: Any) -> dict[str, Any]:
    start = time.perf_counter()
    made = build(state)
    builds.append((time.perf_counter() - start) * 1000)
    return made


write_back.record_provenance = timed_record  # type: ignore[assignment]
write_back.reply_provenance = timed_build  # type: ignore[assignment]
instance = create_sample_instance(url)
memories = [{"content": f"第{n}件事：莱姆在旧仓库找到了第{n}个零件", "turn": 0} for n in range(200)]
MemoryStore(db_url=url).add_memories(instance, memories)
messages = ["零件在哪？", "旧仓库还有什么？", "莱姆去哪了？", "继续找吧。"]
totals: list[float] = []
with turn_graph(Context(database_url=url)) as (graph, context):
    for n in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
        totals.append(run_turn(graph, context, instance, messages[n % 4])["debug"]["total_ms"])
p90 = sorted(inserts)[int(len(inserts) * 0.9) - 1]
print(
    f"{url.split(':')[0]} turns {len(inserts)} insert+flush median {statistics.median(inserts):.2f} ms p90 {p90:.2f}"
    f" build median {statistics.median(builds):.3f} ms bytes median {statistics.median(sizes)}"
    f" turn total median {statistics.median(totals):.0f} ms"
)
