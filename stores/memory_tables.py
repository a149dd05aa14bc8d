"""Tables of the character's long-term memory (seed 001 / 004). Owned by the long-term-memory work."""
