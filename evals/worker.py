"""One scenario of `personalab eval run`, played in a process of its own (`python -m personalab.evals.worker JOB`).

`evals.runs` starts one such process per scenario, with the scenario's own data folder and model in the process's
environment (`PERSONALAB_DATA_DIR`, `PERSONALAB_LLM`; no `PERSONALAB_DATABASE_URL` or `PERSONALAB_CHROMA_HOST`), so
scenarios played at the same time share nothing: not the environment or the settings read from it, not the
engines, Chroma clients and collections cached per path, not the warm-up, the background writers or the
checkpointer. JOB is a JSON file: {"scenario": the validated scenario, "result": where to write the result,
"judge": bool, "rag_timeout_s": float, "via": "inprocess" | "cli" | "served", "repo": the langgraph.json folder for
served, "condition": the memory condition (issue 30: full | recent | history), "scenario_name": the file's name}. The scenario is set up here (Python API); its turns are played in this process, or one `personalab turn`
process each, or by a `langgraph dev` this process starts (evals/via.py). The process writes one line `turn` per turn played to its standard output
(the parent's progress bar; anything else the process prints goes to standard error), and the result (evals.play)
to the result file. SIGINT (Ctrl-C, or the parent passing it on) stops the scenario at the next turn: the result
is then `interrupted`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

TICK = "turn"


def _tick_stream() -> IO[str]:
    """Standard output kept for the ticks alone; file descriptor 1 then points at standard error, so whatever a
    library prints cannot be taken for a tick."""
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def main(argv: Sequence[str] | None = None) -> int:
    stop = threading.Event()
    # set before anything slow is imported: a Ctrl-C during the start-up stops the scenario before its first turn
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    args = list(sys.argv[1:] if argv is None else argv)
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    ticks = _tick_stream()

    from personalab.evals.play import PlayOptions, play_scenario
    from personalab.evals.runs import write_json
    from personalab.evals.scenario import Scenario
    from personalab.evals.via import open_turns
    from personalab.stores.background import flush_event_writes
    from personalab.stores.embeddings import get_embeddings
    from personalab.stores.settings import settings

    scenario = Scenario.model_validate(job["scenario"])
    if settings().llm == "scripted":
        import logging

        # the scripted model writes an out-of-range marker on purpose every 12 turns (the ignored path); its
        # warning per turn would fill the scenario's log
        logging.getLogger("personalab.nodes.progress_parse").setLevel(logging.ERROR)
    via = str(job.get("via") or "inprocess")
    if via == "inprocess":
        get_embeddings().embed_query("预热")  # the model loads once, before any turn's retrieval cap runs
    judge = None
    if job.get("judge"):
        from personalab.evals.judge import Judge

        judge = Judge()

    def tick() -> None:
        ticks.write(TICK + "\n")

    folder = Path(settings().data_dir)
    repo = Path(job["repo"]) if job.get("repo") else None

    condition = str(job.get("condition") or "full")

    def turns() -> Any:
        return open_turns(
            via, folder=folder, rag_timeout_s=float(job["rag_timeout_s"]), repo=repo, memory_mode=condition
        )

    options = PlayOptions(stop=stop, on_turn=tick, judge=judge, condition=condition)
    result = play_scenario(scenario, turns, options)
    result["scenario"] = str(job.get("scenario_name") or scenario.name)  # the file's name, without the condition
    result.setdefault("via", via)  # also when the set-up failed, before any turn
    flush_event_writes()
    write_json(Path(job["result"]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
