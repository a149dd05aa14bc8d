"""Generation (seed 002 Prompt区域分配 + 响应时间要求): assemble the regions under their token budgets and
stream the character's reply from the configured model (ChatOpenAI, or the labelled offline scripted model).

A model error or timeout does not raise out of the graph: the turn is routed to `abort_turn`, which keeps
the user's line, stores no half reply and reports the error."""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import (
    Context,
    context_of,
    long_term_memory,
    middle_tokens_of,
    recall_turns_of,
    text_counter,
)
from personalab.nodes.llm import (
    MarkerFreeStream,
    Timing,
    answer_cap,
    busy_seconds,
    gave_up_waiting,
    get_chat_model,
    measured_speed,
    model_label,
    prompt_estimate,
    record_abandoned,
    record_speed,
)
from personalab.nodes.rules import prompts
from personalab.nodes.rules.card_play import DepthPrompt
from personalab.nodes.rules.character import definition_parts, substitute, user_persona_parts
from personalab.nodes.rules.context_window import ContextWindow, assemble_within_window
from personalab.nodes.rules.core_memory import should_maintain
from personalab.nodes.rules.curation import SCENE_LINES
from personalab.nodes.rules.deadline import (
    FIT_SHARE,
    prompt_tokens_over,
    reply_deadline,
    reply_tokens_within,
    whole_sentences,
)
from personalab.nodes.rules.director import director_blocks
from personalab.nodes.rules.echo import REASON_INPUT, REPEAT_LINES, EchoGuard
from personalab.nodes.rules.prompt_assembly import RegionBudgets, RetrievedBlock, split_latest_user
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.reply import format_lost
from personalab.nodes.rules.review.relations import scene_relations
from personalab.nodes.rules.shown_memory import describe as describe_staying
from personalab.nodes.rules.shown_memory import not_shown, same_dialogue_start, staying_memory, stretch_after
from personalab.nodes.rules.types import PromptMessage, ShownMemory
from personalab.nodes.scripted_llm import ScriptedChatModel
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.failpoints import failpoint
from personalab.stores.tokenizer import text_tokens_of

log = logging.getLogger(__name__)


def budgets_of(ctx: Context, turn: int, floor: int | None = None) -> RegionBudgets:
    """The prompt regions' budgets at `turn` (the recent dialogue's turns depend on it: `recall_step`, and on the
    state's `recall_floor_turn`)."""
    return RegionBudgets(
        head=ctx.head_tokens,
        middle=middle_tokens_of(ctx),
        retrieved=ctx.retrieved_tokens,
        tail=ctx.tail_tokens,
        max_turns=recall_turns_of(ctx, turn, floor),
        chars_per_token=ctx.chars_per_token,
        # the model's own tokenizer when configured (issue 17): exact counts instead of chars_per_token
        text_tokens=text_tokens_of(ctx.tokenizer) if ctx.tokenizer else None,
        tokenizer=Path(ctx.tokenizer).name if ctx.tokenizer else "",
    )


def window_of(ctx: Context) -> ContextWindow:
    """The reply model's context window and the reply's cap (PERSONALAB_CONTEXT_TOKENS, _MAX_REPLY_TOKENS)."""
    return ContextWindow(context_tokens=ctx.context_tokens, reply_tokens=ctx.max_reply_tokens)


def retrieved_blocks(state: TurnState, ctx: Context | None = None) -> list[RetrievedBlock]:
    """The long-term memory injection first (world knowledge, then memories), then the director's two layers
    (current facts, other stories' reference). Without long-term memory (issue 30) no session recap either."""
    blocks = [RetrievedBlock(title=b["title"], items=list(b["items"])) for b in state.get("memory_blocks") or []]
    if state.get("session_recap") and (
        ctx is None or long_term_memory(ctx)
    ):  # a new session's first turn: how the last one ended (seed 002 跨会话延续)
        blocks.insert(0, RetrievedBlock(title=prompts.SESSION_RECAP_TITLE, items=list(state["session_recap"])))
    director = state.get("director_events")
    if director:
        # each exchange once (issue 26): a turn a retrieved memory presents already, the recent dialogue shows or
        # that said something no longer true (the director's `left_out`) is not told again as an event; the
        # director's layers themselves keep every event its search found
        shown = {item.get("turn") for item in state.get("retrieved") or [] if item.get("kind") == "memory"}
        shown |= {t for turns in (director.get("left_out") or {}).values() for t in turns}
        current = [e for e in director.get("current", []) if not (isinstance(e, dict) and e.get("turn") in shown)]
        blocks.extend(director_blocks(current, director.get("others", [])))
    return blocks


def user_persona_part(state: TurnState) -> list[tuple[str, str]]:
    """The user's persona in the head's character block (issue 28): the instance's persona description."""
    character = state["character"]
    language = catalog_for(character.get("language")).language
    return user_persona_parts(character.get("user_persona"), character["name"], state.get("user_name"), language)


def card_play_args(state: TurnState) -> dict[str, Any]:
    """The card's own play (issue 28): the prompt's scaffolding in the instance's language, an open story's
    outline left out, the card's scenario and depth prompt ({{char}} / {{user}} replaced)."""
    character = state["character"]
    catalog = catalog_for(character.get("language"))
    name, user = character["name"], state.get("user_name") or catalog.default_user_name
    depth = character.get("depth_prompt")
    return {
        "catalog": catalog,
        "open_story": bool(character.get("open_story")),
        "scenario": substitute(str(character.get("scenario") or ""), name, user),
        "depth_prompt": (
            DepthPrompt(substitute(depth["text"], name, user), depth["depth"], depth["role"]) if depth else None
        ),
    }


def recent_scene_relations(state: TurnState) -> dict[str, dict[str, int]]:
    """Issue 26: the character's relations with the other participants speaking in the recent scene (this turn's
    lines and the `SCENE_LINES` before them, as for witnesses); one that has not spoken lately is not shown."""
    character = state["character"]
    history = state.get("history") or []
    scene = history[-(len(state.get("lines_before") or []) + 1 + SCENE_LINES) :]
    return scene_relations(state.get("relations"), scene, character.get("role_id"), character["name"])


def build_prompt(
    state: TurnState, ctx: Context, retrieved_cap: int | None = None, recall_turns: int | None = None
) -> Any:
    """The turn's prompt (nodes/rules/prompt_assembly.py) inside the model's window; `retrieved_cap` and
    `recall_turns` (turns of recent dialogue) shorten it for a slow model (`fit_to_speed`)."""
    character = state["character"]
    recent, latest = split_latest_user(state.get("messages", []))
    play = card_play_args(state)
    catalog = play["catalog"]
    name, user = character["name"], state.get("user_name") or catalog.default_user_name

    def field(key: str) -> str:
        # {{char}} / {{user}} replaced in every character field that reaches the model (issue 13)
        return substitute(str(character.get(key) or ""), name, user)

    examples = field("example_dialogue")
    post_history = field("post_history_instructions")
    turn = int(state.get("turn") or 1)
    budgets = budgets_of(ctx, turn, state.get("recall_floor_turn"))
    if recall_turns is not None:
        budgets = replace(budgets, max_turns=recall_turns)
    blocks = [
        RetrievedBlock(title=catalog.title(block.title), items=[catalog.item(item) for item in block.items])
        for block in retrieved_blocks(state, ctx)
    ]
    stays = ctx.memory_stays >= 2 and long_term_memory(ctx)
    shown = state.get("shown_memory") or []
    staying = staying_memory(shown, turn=turn, stays=ctx.memory_stays) if stays else []

    def assemble(staying: list[ShownMemory]) -> Any:
        return assemble_within_window(
            window_of(ctx),
            retrieved_cap=retrieved_cap,
            retrieved_blocks=not_shown(blocks, staying),
            staying_memory={turn - int(region["turn"]): region["text"] for region in staying},
            **parts,
        )

    parts: dict[str, Any] = dict(
        system_instruction=catalog.role_play_instruction(name, open_story=play["open_story"]),
        character_parts=definition_parts(
            {key: field(key) for key in ("system_prompt", "persona", "description")}, catalog.labels()
        )
        + user_persona_part(state),
        example_dialogue=catalog.example_dialogue_label + "\n" + examples if examples.strip() else "",
        post_history=catalog.post_history_label + "\n" + post_history if post_history.strip() else "",
        core_memory=state.get("core_memory", {}),
        plot_state=state["plot_state"],
        relationship=state.get("relationship") or None,
        relations=recent_scene_relations(state),
        world_setting=field("world_setting"),
        recent_messages=recent,
        user_input=latest or state["message"],
        budgets=budgets,
        turn=state.get("turn"),
        position_texts=state.get("injected") or {},
        format_note=catalog.format_note if format_lost(recent) else "",
        **play,
    )
    prompt = assemble(staying)
    if not stays:
        return prompt
    first_turn = turn - int(prompt.debug["middle"]["turns_kept"])
    dropped = None
    if staying and not same_dialogue_start(staying, first_turn):
        # the server reads the dialogue again from its new start anyway: a fresh region costs nothing more there
        dropped = "the recent dialogue's first turn moved: a fresh region"
        staying = []
        prompt = assemble(staying)
        first_turn = turn - int(prompt.debug["middle"]["turns_kept"])
    elif shown and not staying:
        dropped = f"the stretch held {ctx.memory_stays} turns: a fresh region"
    prompt.debug["retrieved"]["staying"] = describe_staying(staying, first_turn, dropped)
    return prompt


def shown_after(state: TurnState, prompt: Any) -> list[ShownMemory]:
    """The stretch a turn leaves (`shown_memory`, nodes/rules/shown_memory.py): the regions that stayed in its
    prompt and the region it showed; empty when memory does not stay."""
    info = prompt.debug.get("retrieved", {}).get("staying")
    if info is None:
        return []
    staying = [region for region in state.get("shown_memory") or [] if int(region["turn"]) in info["turns"]]
    texts = {region["text"] for region in staying}
    sent = zip(reversed(prompt.messages), reversed(prompt.regions), strict=True)
    region = next((m["content"] for m, where in sent if where == "retrieved" and m["content"] not in texts), None)
    return stretch_after(
        staying,
        turn=int(state.get("turn") or 1),
        first_turn=int(info["first_turn"]),
        region=region,
        items=prompt.retrieved_items,
    )


def prompt_messages(prompt: Any) -> list[PromptMessage]:
    """The assembled prompt as the turn's output shows it: every message with its region."""
    return [
        {"role": message["role"], "region": region, "content": message["content"]}
        for message, region in zip(prompt.messages, prompt.regions, strict=True)
    ]


MIN_RECALL_TURNS = 2
"""The fewest turns of recent dialogue a prompt keeps to fit a slow model: the exchange before the user's line and
the one before it, so the reply still follows the conversation."""


def fit_to_speed(
    state: TurnState, ctx: Context, prompt: Any, model: Any, until: float
) -> tuple[Any, dict[str, Any] | None, tuple[int | None, int | None]]:
    """Issue 30: the prompt a slow model can answer by `until`. With the reply model's speed measured (nodes/llm.py),
    the prompt's new tokens (past what the server's prompt cache is expected to hold, and after the prompt a given-up
    request still has it reading) and a usual reply are timed; when that is over what is left (nodes/rules/deadline.py
    `prompt_tokens_over`), the prompt gives up the difference rather than the turn being cut at the deadline:

    1. older turns of the recent dialogue, when the server must read the dialogue again anyway (a core-memory
       rewrite above it, or the window's start moved) — most turns kept first, never fewer than `MIN_RECALL_TURNS`;
       the turns after it start their dialogue at the same turn (`recall_floor_turn`), so their prompts share it;
    2. then the retrieved region, lowest-ranked items first.

    Returns (the prompt, what was done or None, (prompt tokens, of them new) of the prompt returned). An exchange the
    turn's retrieval left out as being in the recent dialogue stays out for this turn when its turn is given up."""
    count = text_counter(ctx).text
    estimate = prompt_estimate(model, prompt.messages, count)
    speed = measured_speed(prompts.PURPOSE_REPLY)
    if speed is None or estimate[1] is None:
        return prompt, None, estimate
    busy = busy_seconds(model)
    left = until - time.time() - busy
    reply_tokens = speed.usual_reply_tokens(ctx.max_reply_tokens)
    over = prompt_tokens_over(speed, estimate[1], reply_tokens, left)
    if not over:
        return prompt, None, estimate
    fitted: dict[str, Any] = {
        "reason": (
            f"about {speed.seconds(estimate[1], round(reply_tokens)):.1f} s expected for {estimate[1]} new prompt "
            f"tokens at {speed.prompt_per_s:.0f}/s and a usual reply of {reply_tokens:.0f} tokens, over "
            f"{FIT_SHARE:.0%} of the {left:.1f} s left"
        ),
        "server_busy_s": round(busy, 3),
    }
    fitted_prompt, fitted_estimate, kept = prompt, estimate, None

    def new_tokens_over(candidate: Any) -> tuple[tuple[int | None, int | None], int]:
        guess = prompt_estimate(model, candidate.messages, count)
        return guess, prompt_tokens_over(speed, guess[1] or 0, reply_tokens, left)

    turns = recall_turns_of(ctx, int(state.get("turn") or 1), state.get("recall_floor_turn"))
    if ctx.memory_mode != "history" and turns > MIN_RECALL_TURNS:
        fewest = build_prompt(state, ctx, recall_turns=MIN_RECALL_TURNS)
        fewest_estimate, fewest_over = new_tokens_over(fewest)
        if (fewest_estimate[1] or 0) < estimate[1]:  # the dialogue is read again anyway: fewer turns are fewer tokens
            fitted_prompt, fitted_estimate, kept, over = fewest, fewest_estimate, MIN_RECALL_TURNS, fewest_over
            # the most turns that fit, or the most whose prompt reuses the server's cache past the turn's own prompt:
            # the new tokens do not always grow with the turns — a retry of a turn cut at the deadline finds the cut
            # prompt's dialogue in the cache, and only that many turns reuse it (each new fit read the dialogue again,
            # on a speed each cut had lowered, and was cut again: five tries of one turn with the 1.5B model)
            reused = (estimate[0] or 0) - estimate[1]  # the cache's share of the turn's own prompt: its head
            most: tuple[Any, tuple[int | None, int | None], int] | None = None
            for middle in range(turns - 1, MIN_RECALL_TURNS - 1, -1) if not over else ():
                if middle == MIN_RECALL_TURNS:
                    candidate, candidate_estimate, candidate_over = fewest, fewest_estimate, fewest_over
                else:
                    candidate = build_prompt(state, ctx, recall_turns=middle)
                    candidate_estimate, candidate_over = new_tokens_over(candidate)
                if candidate_over:
                    continue
                if reuses_more(candidate_estimate, reused):
                    most = (candidate, candidate_estimate, middle)
                    break
                most = most or (candidate, candidate_estimate, middle)
            if most is not None:
                fitted_prompt, fitted_estimate, kept = most
            fitted["recall_turns"] = {"before": turns, "after": kept}
    retrieved = int(fitted_prompt.debug["retrieved"]["tokens"])
    if over and retrieved:
        shorter = build_prompt(state, ctx, retrieved_cap=max(0, retrieved - over), recall_turns=kept)
        fitted["retrieved_tokens"] = {"before": retrieved, "after": int(shorter.debug["retrieved"]["tokens"])}
        fitted["items_kept"] = {
            "before": fitted_prompt.debug["retrieved"].get("items_kept", 0),
            "after": shorter.debug["retrieved"].get("items_kept", 0),
        }
        fitted_prompt, fitted_estimate = shorter, prompt_estimate(model, shorter.messages, count)
    if fitted_prompt is prompt:
        return prompt, None, estimate
    return fitted_prompt, fitted, fitted_estimate


def reply_cap(ctx: Context, model: Any, new_tokens: int | None, until: float) -> int | None:
    """Issue 30: the reply tokens a request may ask for so that a slow model ends by itself before `until`
    (nodes/rules/deadline.py `reply_tokens_within`, from the reply model's measured speed and the prompt's new
    tokens); None without a measured speed, for the offline model, or when PERSONALAB_MAX_REPLY_TOKENS fits."""
    speed = measured_speed(prompts.PURPOSE_REPLY)
    if speed is None or new_tokens is None:
        return None
    return reply_tokens_within(speed, new_tokens, until - time.time() - busy_seconds(model), ctx.max_reply_tokens)


REUSE_MARGIN_TOKENS = 16
"""More tokens than this past what the turn's own prompt reuses: a candidate starts its dialogue where the prompt in
the server's cache does (`reuses_more`); fewer may be a token counted either side of the shared prefix's end."""


def reuses_more(estimate: tuple[int | None, int | None], reused: int) -> bool:
    """Whether a candidate prompt (its estimate: prompt tokens, of them new) is expected to reuse more of the server's
    prompt cache than `reused` tokens, by more than `REUSE_MARGIN_TOKENS`."""
    total, new = estimate
    return total is not None and new is not None and total - new > reused + REUSE_MARGIN_TOKENS


def recall_floor_after(state: TurnState, fitted: dict[str, Any] | None) -> int | None:
    """The `recall_floor_turn` a turn whose prompt kept fewer turns of dialogue leaves for the next turns: the first
    turn it kept (None when it kept the regular window)."""
    if not fitted or "recall_turns" not in fitted:
        return None
    return int(state.get("turn") or 1) - int(fitted["recall_turns"]["after"])


def calls_after_reply(state: TurnState, ctx: Context) -> int:
    """Model calls the turn makes once its reply is stored: the core-memory maintenance on its turns, the review
    in llm mode (seed 002 定期维护, seed 003); the deadline holds back a share for each."""
    maintains = long_term_memory(ctx) and should_maintain(state["turn"], ctx.maintenance_every)
    return int(maintains) + int(ctx.review_mode == "llm")


def generate(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node: the prompt fitted inside the model's window, the reply streamed within the turn's deadline.

    Fails the turn (`error`, nothing stored) when the prompt cannot fit the window, on a model error or timeout,
    on a stream that ends without its end, and when the deadline passes while the reply streams (the stream is
    closed there: a cut reply is never stored). A reply that reaches max_tokens (finish_reason `length`) is the
    model's own text cut at the cap and is stored, like one over PERSONALAB_MAX_REPLY_CHARS (`debug.reply_cut`)."""
    ctx = context_of(runtime)
    prompt = build_prompt(state, ctx)
    sent = prompt_messages(prompt)
    window = prompt.debug.get("window", {})
    if not window.get("fits", True):
        return {
            "error": "the prompt does not fit the model's context window; " + "; ".join(window.get("notes", [])[:1]),
            "model": "none (not called)",
            "prompt": sent,
            "debug": {"prompt": prompt.debug},
        }
    deadline_at = state.get("deadline_at") or time.time() + ctx.turn_deadline_s
    until = reply_deadline(deadline_at, ctx.turn_deadline_s, calls_after_reply(state, ctx))
    # a regenerate's number: the offline model's replies differ per regeneration, reproducibly (issue 28)
    variant = int(((state.get("debug") or {}).get("regenerate") or {}).get("replies_before") or 0)
    model = get_chat_model("reply", until=until, max_tokens=ctx.max_reply_tokens, variant=variant)
    prompt, fitted, estimate = fit_to_speed(state, ctx, prompt, model, until)
    if fitted:
        sent = prompt_messages(prompt)
    label = model_label(model)
    # issue 30: a reply that only repeats the input or the character's own last lines is held back and asked once
    # more (nodes/rules/echo.py)
    guard = echo_guard(state, ctx, model, until)
    shown = MarkerFreeStream(inner=model, echo=guard)  # what the stream's readers get: the reply without its markers
    # stream() lets LangGraph's "messages" stream mode pass tokens on to the caller as they arrive
    failpoint("before_model")
    model_started = time.time()
    # the server's speed and cache reuse (issue 30); the engine's estimate when the server reports no usage
    timing = Timing(sent=model_started, prompt_tokens=estimate[0], evaluated=estimate[1])
    # the speed the next turns plan with is the first request's: a second one (an echo asked again) reads only the
    # note, and its few tokens time mostly the server's overhead (restoring its cache), not its reading
    speed_timing = timing
    echo_debug: dict[str, Any] | None = None
    # a reply longer than the time left holds ends at its cap instead of being cut at the deadline (nothing stored)
    cap = reply_cap(ctx, model, estimate[1], until)
    try:
        finish, late = _stream_reply(shown, prompt.messages, until, timing, answer_cap(model, cap))
        if guard is not None and guard.echoed:
            echo_debug = {
                "first_reply": "".join(shown.raw)[:200],
                "of": guard.reason,
                "status": "kept: the time left could not hold a second reply",
            }
        if guard is not None and guard.echoed and not guard.kept and not late:
            # the first answer is dropped unseen; the note follows the input, so the server's cache holds the rest
            catalog = catalog_for(state["character"].get("language"))
            note = catalog.echo_note if guard.reason == REASON_INPUT else catalog.repeat_note
            asked = [*prompt.messages, {"role": "system", "content": note.format(role_name=state["character"]["name"])}]
            sent = [*sent, {"role": "system", "region": "tail", "content": asked[-1]["content"]}]
            echoed, shown = shown, MarkerFreeStream(inner=model)
            echo_debug = {**(echo_debug or {}), "status": "asked once more with the note after the input"}
            if estimate[1] is not None:  # the server reports no usage: the engine counts the first answer
                timing.written = text_counter(ctx).text("".join(echoed.raw))
            again = prompt_estimate(model, asked, text_counter(ctx).text)
            timing = Timing(sent=time.time(), prompt_tokens=again[0], evaluated=again[1])
            estimate = again
            cap = reply_cap(ctx, model, again[1], until)
            finish, late = _stream_reply(shown, asked, until, timing, answer_cap(model, cap))
    except Exception as exc:  # noqa: BLE001 - any model failure ends the turn cleanly, never half-stored
        if gave_up_waiting(exc):  # the client's own timeout: the server may still be reading the prompt
            record_abandoned(model, timing, estimate[1] or 0)
        log.error("generation failed on instance %s: %s", state["instance_id"], exc)
        return {
            "error": f"model error ({type(exc).__name__}): {exc}",
            "model": label,
            "prompt": sent,
            "debug": {"prompt": prompt.debug, "deadline": _deadline_debug(deadline_at, until)},
        }
    debug: dict[str, Any] = {
        "prompt": prompt.debug,
        "finish_reason": finish,
        "deadline": _deadline_debug(deadline_at, until),
        "turn_time": {"reply_model_ms": round((time.time() - model_started) * 1000, 2)},
        "server": timing.debug(),
    }
    if fitted:
        debug["slow_model"] = fitted
    if echo_debug is not None:
        debug["echo"] = echo_debug
    text = "".join(shown.raw)  # the model's own text, markers included, for the progress parser
    if estimate[1] is not None:  # the server reports no usage: the engine counts the answer
        timing.written = text_counter(ctx).text(text)
    if late:
        record_abandoned(model, timing, estimate[1] or 0)  # a server still reading its prompt makes the next turn wait
        # its prompt was read (the first chunk came): the speed it showed is what the next turns must plan with; a
        # speed measured too fast would otherwise cut every turn after it, none of them measuring again
        record_speed(model, speed_timing, cut_reply=True)
        log.error("instance %s: turn deadline reached while the reply streamed", state["instance_id"])
        debug["deadline"]["cut_after_chars"] = len(text)
        return {
            "error": f"turn deadline ({ctx.turn_deadline_s:g} s) reached while the reply streamed "
            f"({len(text)} characters received); no reply stored",
            "model": label,
            "prompt": sent,
            "debug": debug,
        }
    if estimate[1] is not None:
        debug["server"] = timing.debug()
    # the next turns decide on it: the rewrite (nodes/query_rewrite.py), the reply's prompt (fit_to_speed); a reply
    # the time cap ended was at least that long, like a cut one: it raises the usual size, never lowers it (the fit
    # would otherwise plan ever shorter replies, and cap ever more of them)
    capped = finish == "length" and cap is not None
    record_speed(model, speed_timing, reply=not capped, cut_reply=capped)
    if not text.strip():
        return {"error": "model returned an empty reply", "model": label, "prompt": sent, "debug": debug}
    if finish is None:
        # the stream ended without the model's end (a dropped connection, a proxy's timeout): what came is a
        # fragment, and storing it as the reply would put words in the character's mouth
        return {
            "error": "model stream ended without its end (cut off); no reply stored",
            "model": label,
            "prompt": sent,
            "debug": debug,
        }
    if finish == "length" and cap is not None:
        # the time cap, not the model, ended it: the reply keeps its whole sentences
        kept = whole_sentences(text)
        debug["reply_cut"] = {
            "reason": f"the time left held about {cap} reply tokens (of max_tokens {ctx.max_reply_tokens})",
            "chars": len(text),
            "kept": len(kept),
        }
        text = kept
    elif finish == "length":
        debug["reply_cut"] = {"reason": f"the model reached max_tokens ({ctx.max_reply_tokens})", "chars": len(text)}
    if len(text) > ctx.max_reply_chars:
        debug["reply_cut"] = {"chars": len(text), "kept": ctx.max_reply_chars}
        text = text[: ctx.max_reply_chars]
    update: TurnUpdate = {"reply_raw": text, "model": label, "prompt": sent, "debug": debug}
    update["shown_memory"] = shown_after(state, prompt)
    floor = recall_floor_after(state, fitted)
    if floor is not None:
        update["recall_floor_turn"] = floor
    return update


def echo_guard(state: TurnState, ctx: Context, model: Any, until: float) -> EchoGuard | None:
    """The reply's `EchoGuard` (issue 30), or None: off by setting (`PERSONALAB_ECHO_RETRY`) and for the offline
    scripted model, whose canned replies quote the input on purpose. A second reply is afforded while `FIT_SHARE` of
    the time left holds the note's reading and a reply as long as the first one (or a usual reply, if longer) at the
    measured writing speed (always, with no speed measured): a second reply cut at the deadline loses the turn,
    where the first was a whole reply (session 18's Chinese run: 12 of 15 cuts were second replies planned as a
    usual reply, after a first one about twice as long)."""
    if not ctx.echo_retry or isinstance(model, ScriptedChatModel):
        return None

    def afford_retry(first_reply: str) -> bool:
        speed = measured_speed(prompts.PURPOSE_REPLY)
        if speed is None:
            return True
        reply_tokens = max(speed.usual_reply_tokens(ctx.max_reply_tokens), text_counter(ctx).text(first_reply))
        needed = speed.seconds(ECHO_NOTE_TOKENS, round(min(reply_tokens, ctx.max_reply_tokens)))
        return needed <= FIT_SHARE * (until - time.time())

    return EchoGuard(str(state["message"]), afford_retry, own_lines=own_last_lines(state))


def own_last_lines(state: TurnState) -> list[str]:
    """The character's last `REPEAT_LINES` replies in the dialogue it sees (seed 000's message list), latest last."""
    replies = [m.get("content") or "" for m in state.get("messages", []) if m.get("role") == "assistant"]
    return [str(reply) for reply in replies[-REPEAT_LINES:]]


ECHO_NOTE_TOKENS = 40
"""The note a second reply reads past the first one's prompt (the server's cache holds that prompt)."""


def _stream_reply(
    shown: MarkerFreeStream, messages: list[Any], until: float, timing: Timing, request: dict[str, Any]
) -> tuple[str | None, bool]:
    """The reply streamed through `shown` until it ends or `until` passes: (finish_reason, late). The model's text is
    in `shown.raw`; a model failure is raised. `request`: the request's own options (its answer cap)."""
    chunks = 0
    finish: str | None = None
    late = False
    reader = _StreamReader(shown.stream(messages, **request))
    try:
        for chunk in reader.chunks(until):
            timing.see(chunk)
            chunks += 1
            if chunks == 1:
                failpoint("mid_stream")
            finish = chunk.response_metadata.get("finish_reason") or finish
            if finish is None and time.time() > until:
                late = True  # the deadline passed mid-reply: stop reading, the stream is closed below
                break
        late = late or reader.late  # or it passed while no chunk came (a long prompt evaluation)
    finally:
        reader.stop()
    return finish, late


class _StreamReader:
    """The reply's stream read on its own thread, so the deadline holds even while no chunk comes: a server that
    keeps the connection alive during a long prompt evaluation (llama-cpp-python's server sends an SSE ping every
    15 s) never lets the client's per-read timeout fire, and a reader blocked in the stream could not look at the
    clock. `chunks(until)` yields what arrives and stops at `until` (`late`); `stop()` asks the thread to close the
    stream — closing the generator closes the HTTP response, so a server stops generating once the client is gone —
    at its next chunk (a generator can only be closed by the thread running it). The thread runs in a copy of the
    node's context, so LangGraph's stream modes still get the tokens."""

    _END = object()

    def __init__(self, stream: Iterator[Any]) -> None:
        self._stream = stream
        self._queue: queue.Queue[Any] = queue.Queue()
        self._stopping = threading.Event()
        self.late = False
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._pump,), name="reply-stream", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for chunk in self._stream:
                if self._stopping.is_set():
                    break
                self._queue.put(chunk)
        except BaseException as exc:  # noqa: BLE001 - handed to the node, which ends the turn cleanly
            self._queue.put(exc)
        finally:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
            self._queue.put(self._END)

    def chunks(self, until: float) -> Iterator[Any]:
        while True:
            try:
                item = self._queue.get(timeout=max(until - time.time(), 0.0))
            except queue.Empty:
                self.late = True  # the deadline passed with no chunk in hand
                return
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        self._stopping.set()


def _deadline_debug(deadline_at: float, until: float) -> dict[str, Any]:
    """Seconds left of the turn and of the reply's share when the reply ended (debug.deadline)."""
    now = time.time()
    return {"turn_left_s": round(deadline_at - now, 3), "reply_left_s": round(until - now, 3)}
