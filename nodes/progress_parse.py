"""Graph node progress_parse (seed 002 需求1, seed 000 台词格式): the reply's markers → plot state; the reply → lines."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.rules.plot import apply_progress, extract_progress, markers_within_reach, progress_events
from personalab.nodes.rules.prompt_catalog import scaffolding_headings
from personalab.nodes.rules.reply import cut_at_heading, format_reply, parse_reply
from personalab.nodes.state import TurnState, TurnUpdate


def progress_parse(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node: markers of the model's reply → plot state; the reply without markers → the lines to store.

    Only the model's reply is scanned: a marker typed by the user or in a host line is never honoured."""
    plot_state = state["plot_state"]
    turn = state["turn"]
    clean, markers, ignored = extract_progress(state["reply_raw"], len(plot_state["story_outline"]))
    markers, out_of_reach = markers_within_reach(
        markers, plot_state["current_plot_index"], context_of(runtime).progress_max_step
    )
    ignored = [*ignored, *out_of_reach]
    for item in ignored:
        logging.getLogger(__name__).warning(
            "instance %s turn %s: ignored %s (%s)", state.get("instance_id"), turn, item["raw"], item["reason"]
        )
    # the prompt's own sections a small model wrote on after its answer are not the character's line (issue 30)
    clean, heading = cut_at_heading(clean, scaffolding_headings())
    segments = parse_reply(clean)
    if not segments:
        # nothing left to say once the markers and emotions are out (`【开心】`, a bare marker): a failed turn, and
        # its markers are not applied, since no reply carries them
        return {
            "error": "the reply has no text once its markers and emotion tags are taken out; no reply stored",
            "debug": {"progress": {"markers": [], "ignored": ignored, "dropped_markers": markers}},
        }
    progress: dict[str, Any] = {"markers": markers, "ignored": ignored}
    if heading is not None:
        progress["cut_at_heading"] = heading
    update: TurnUpdate = {"reply": format_reply(segments), "reply_lines": segments, "debug": {"progress": progress}}
    if markers:
        update["plot_state"] = apply_progress(plot_state, markers, turn)
        language = state["character"].get("language")  # issue 28: the events in the instance's language
        update["state_events"] = [*state.get("state_events", []), *progress_events(plot_state, markers, turn, language)]
    return update
