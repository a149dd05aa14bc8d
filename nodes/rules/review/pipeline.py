"""ReviewPipeline (seed 003, 审查流程 and 事件发射): one review per turn — the started event, the rule review
(or the LLM review over it), the scored events, the finished event.

mode "rule" returns `run_rule_review`'s result. mode "llm" asks the model (section 扩展为 LLM 版本, see
`review.answer`); when the call raises or the answer is invalid, the rule result is returned with
`fallback_reason` set and a warning logged. A valid answer's four LLM scores are cached per
conversation_id, and every later review of that conversation (rule mode too) reports them until a newer
answer replaces them; they may thus describe an earlier turn. `run` and `arun` differ only in how they
call the model; everything else happens once, in `_begin` and `_finish`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.answer import InvalidAnswerError, answer_text, output_from_answer, parse_answer
from personalab.nodes.rules.review.prompts import build_review_messages
from personalab.nodes.rules.review.rules import run_rule_review
from personalab.nodes.rules.review.types import DEFAULT_CONFIG, LLMAssessment, ReviewConfig, ReviewInput, ReviewOutput

logger = logging.getLogger(__name__)

EVENT_STARTED = "review.started"
EVENT_MEMORY_SCORED = "review.memory.scored"
EVENT_RELATIONSHIP_SCORED = "review.relationship.scored"
EVENT_PLOT_SCORED = "review.plot.scored"
EVENT_FINISHED = "review.finished"
EVENT_NAMES: tuple[str, ...] = (  # the order a review emits them in
    EVENT_STARTED,
    EVENT_MEMORY_SCORED,
    EVENT_RELATIONSHIP_SCORED,
    EVENT_PLOT_SCORED,
    EVENT_FINISHED,
)

EventHandler = Callable[[str, dict[str, Any]], object]


class EventBus:
    """A small synchronous event bus (seed 003, 事件发射).

    `subscribe(name, handler)` with an event name or "*" for every event; a handler is called as
    `handler(event_name, payload)` with its own copy of the payload. A handler that raises is logged and
    skipped: the emitter and the other handlers go on.
    """

    def __init__(self) -> None:
        self._handlers: list[tuple[str, EventHandler]] = []
        self._lock = threading.Lock()

    def subscribe(self, event_name: str, handler: EventHandler) -> Callable[[], None]:
        """Register `handler`; returns a function that unsubscribes it."""
        if not isinstance(event_name, str) or not event_name:
            raise InvalidInput(f"EventBus.subscribe needs an event name or '*', got {event_name!r}")
        if not callable(handler):
            raise InvalidInput(f"EventBus.subscribe needs a callable handler, got {handler!r}")
        entry = (event_name, handler)
        with self._lock:
            self._handlers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._handlers:
                    self._handlers.remove(entry)

        return unsubscribe

    def emit(self, event_name: str, payload: Mapping[str, Any]) -> None:
        with self._lock:
            handlers = [handler for name, handler in self._handlers if name in (event_name, "*")]
        for handler in handlers:
            try:
                # A copy each, so one subscriber editing its payload cannot change what the next one sees.
                handler(event_name, json.loads(json.dumps(payload, default=str)))
            except Exception:
                logger.exception("review event subscriber %r failed on %s", handler, event_name)


class AssessmentCache:
    """The latest LLM assessment per conversation (the seed's AutoState cache), keyed by str(conversation_id): at
    most `size` conversations, the one used least recently forgotten first (a long-lived server meets conversations
    without end; a forgotten one's next review falls back as at its first turn)."""

    SIZE = 1024

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, LLMAssessment] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conversation_id: str | int) -> LLMAssessment | None:
        with self._lock:
            found = self._items.get(str(conversation_id))
            if found is not None:
                self._items.move_to_end(str(conversation_id))
            return found

    def put(self, conversation_id: str | int, assessment: LLMAssessment) -> None:
        with self._lock:
            self._items[str(conversation_id)] = assessment
            self._items.move_to_end(str(conversation_id))
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def kept(self) -> int:
        """How many conversations' assessments are kept (not `__len__`: an empty cache is still a cache)."""
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class ReviewPipeline:
    """ReviewPipeline.run() (seed 003, 审查流程): emits review.started, review.memory.scored,
    review.relationship.scored, review.plot.scored and review.finished, in that order, and returns the output.

    mode "rule" runs `run_rule_review`; mode "llm" asks `llm` and falls back to the rule result (see the
    module docstring). `cache` holds the LLM assessments per conversation; a new one when not given.
    """

    def __init__(
        self,
        mode: Literal["rule", "llm"] = "rule",
        event_bus: EventBus | None = None,
        llm: BaseChatModel | None = None,
        config: ReviewConfig | None = None,
        cache: AssessmentCache | None = None,
        language: str | None = None,
    ) -> None:
        if mode not in ("rule", "llm"):
            raise InvalidInput(f"ReviewPipeline mode must be 'rule' or 'llm', got {mode!r}")
        if mode == "llm" and llm is None:
            raise InvalidInput("ReviewPipeline mode 'llm' needs an llm (a langchain BaseChatModel)")
        if config is not None and not isinstance(config, ReviewConfig):
            raise InvalidInput(f"ReviewPipeline config must be a ReviewConfig, got {type(config).__name__}")
        self.mode = mode
        self.event_bus = event_bus if event_bus is not None else EventBus()
        self.llm = llm
        self.config = config or DEFAULT_CONFIG
        self.cache = cache if cache is not None else AssessmentCache()
        self.language = language  # the instance's (issue 28): the model's request in it; None is Chinese

    def run(self, inp: ReviewInput | Mapping[str, Any]) -> ReviewOutput:
        """Review one turn; `inp` may be a mapping, validated like `ReviewInput.from_dict`."""
        inp, rule, prompt = self._begin(inp)
        reply: object = None
        if prompt is not None:
            assert self.llm is not None  # checked in __init__ for mode "llm"
            try:
                reply = self.llm.invoke(prompt)
            except Exception as exc:  # noqa: BLE001 - any failed call falls back to the rule result
                reply = exc
        return self._finish(inp, rule, reply)

    async def arun(self, inp: ReviewInput | Mapping[str, Any]) -> ReviewOutput:
        """`run` for async graphs: the model is called with `ainvoke`."""
        inp, rule, prompt = self._begin(inp)
        reply: object = None
        if prompt is not None:
            assert self.llm is not None  # checked in __init__ for mode "llm"
            try:
                reply = await self.llm.ainvoke(prompt)
            except Exception as exc:  # noqa: BLE001 - any failed call falls back to the rule result
                reply = exc
        return self._finish(inp, rule, reply)

    def _begin(
        self, inp: ReviewInput | Mapping[str, Any]
    ) -> tuple[ReviewInput, ReviewOutput, list[BaseMessage] | None]:
        """The checked input, review.started, the rule result, and the model's prompt (None in rule mode)."""
        if not isinstance(inp, ReviewInput):
            if not isinstance(inp, Mapping):
                raise InvalidInput(f"ReviewPipeline.run needs a ReviewInput or a mapping, got {type(inp).__name__}")
            inp = ReviewInput.from_dict(inp)
        self.event_bus.emit(EVENT_STARTED, {**self._ids(inp), "user_id": inp.user_id, "mode": self.mode})
        rule = run_rule_review(inp, self.config, self.cache.get(inp.conversation_id))
        prompt = build_review_messages(inp.to_dict(), rule.to_dict(), self.language) if self.mode == "llm" else None
        return inp, rule, prompt

    def _finish(self, inp: ReviewInput, rule: ReviewOutput, reply: object) -> ReviewOutput:
        """The output — the rule result, the model's answer over it, or the rule result as a fallback — and
        the scored and finished events. `reply` is None in rule mode, the exception when the call failed."""
        if self.mode == "rule":
            output = rule
        elif isinstance(reply, Exception):
            output = self._fallback(inp, rule, f"LLM call failed: {type(reply).__name__}: {reply}")
        else:
            try:
                answer = parse_answer(answer_text(reply), self.config)
            except InvalidAnswerError as exc:
                output = self._fallback(inp, rule, str(exc))
            else:
                self.cache.put(inp.conversation_id, answer.assessment())
                output = output_from_answer(answer, rule)
        self._emit_scores(inp, output)
        return output

    @staticmethod
    def _fallback(inp: ReviewInput, rule: ReviewOutput, reason: str) -> ReviewOutput:
        logger.warning("LLM review of conversation %s fell back to the rule review: %s", inp.conversation_id, reason)
        return replace(rule, fallback_reason=reason)

    @staticmethod
    def _ids(inp: ReviewInput) -> dict[str, Any]:
        return {"conversation_id": inp.conversation_id, "character_id": inp.character_id}

    def _emit_scores(self, inp: ReviewInput, out: ReviewOutput) -> None:
        ids = self._ids(inp)
        self.event_bus.emit(
            EVENT_MEMORY_SCORED,
            {
                **ids,
                "memory_value": out.memory_value,
                "should_write_memory": out.should_write_memory,
                "reasons": {key: out.reasons[key] for key in ("memory_value", "should_write_memory")},
            },
        )
        self.event_bus.emit(
            EVENT_RELATIONSHIP_SCORED,
            {
                **ids,
                "relationship_delta": out.relationship_delta.to_dict(),
                "total_delta": out.total_delta,
                "relationship_progress": out.quality.relationship_progress,
                "matched_keywords": out.matched_keywords,
                "reason": out.reasons["relationship"],
            },
        )
        self.event_bus.emit(
            EVENT_PLOT_SCORED,
            {
                **ids,
                "choice_level": out.choice_level,
                "story_progress": out.quality.story_progress,
                "suggest_plot_node": out.suggest_plot_node,
                "suggest_worldbook_update": out.suggest_worldbook_update,
                "reasons": {key: out.reasons[key] for key in ("plot_node", "worldbook")},
            },
        )
        self.event_bus.emit(
            EVENT_FINISHED,
            {
                **ids,
                "skipped": out.skipped,
                "should_write_memory": out.should_write_memory,
                "memory_value": out.memory_value,
                "relationship_delta": out.relationship_delta.to_dict(),
                "total_delta": out.total_delta,
                "suggest_plot_node": out.suggest_plot_node,
                "suggest_worldbook_update": out.suggest_worldbook_update,
                "quality": asdict(out.quality),
                "source": out.source,
                "fallback_reason": out.fallback_reason,
            },
        )


_SHARED_CACHE = AssessmentCache()


def get_review_pipeline(
    event_bus: EventBus | None = None,
    *,
    mode: Literal["rule", "llm"] = "rule",
    llm: BaseChatModel | None = None,
    config: ReviewConfig | None = None,
    cache: AssessmentCache | None = None,
    language: str | None = None,
) -> ReviewPipeline:
    """A pipeline for one turn (seed 003, 基本用法): rule mode unless told otherwise.

    The seed calls this once per turn, so by default every pipeline it returns shares one process-wide
    `AssessmentCache`: an LLM assessment made in one turn is still there in the next.
    """
    return ReviewPipeline(
        mode=mode,
        event_bus=event_bus,
        llm=llm,
        config=config,
        cache=cache if cache is not None else _SHARED_CACHE,
        language=language,
    )
