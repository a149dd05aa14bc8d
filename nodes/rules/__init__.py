"""Floor 1: the seeds' rules as pure functions and the domain types they work on.

No LangGraph, no stores, no I/O: everything here takes values and returns values, so a rule can be read and
tested on its own. The graph's nodes (one floor up, `personalab.nodes`) and the stores apply them.
"""
