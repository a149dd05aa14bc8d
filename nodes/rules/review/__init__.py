"""The post-turn review (seed 003, "ReviewPipeline 审查管道"): one finished turn in, a structured verdict out —
whether to write a memory, how the relationship moved, whether the plot or the world book needs an update,
and quality scores. Pure code: plain data in, plain data out; no database, no LangGraph.

The package by job (import each name from the module that defines it):
- `types`    ReviewInput (and its SelectedChoice, RealTimeContext), ReviewConfig, ReviewOutput,
             RelationshipDelta, QualityScores, LLMAssessment; the seed's CHOICE_LEVELS, GAPS, REASON_KEYS
- `rules`    规则版审查: keyword matching, the scores, the write / skip decisions, `run_rule_review`
- `answer`   扩展为 LLM 版本: the model's answer (`ReviewAnswer`), `parse_answer`, `InvalidAnswerError`,
             `output_from_answer`
- `prompts`  the LLM review's prompt texts, `build_review_messages`
- `pipeline` 审查流程 and 事件发射: `ReviewPipeline` (run / arun), `EventBus`, `AssessmentCache`,
             `get_review_pipeline`
- `effects`  what a review changes beyond the turn: the relationship, its memory, the time gap, plot nodes
             and world-book suggestions (`plan_review_effects`)

The graph's `review` node (`nodes/review.py`) builds a `ReviewInput` from the turn, runs the pipeline and
applies the plan; `stores.review` keeps plot nodes and world-book suggestions.
"""
