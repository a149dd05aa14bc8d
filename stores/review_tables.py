"""Tables of the post-turn review (seed 003): relationship state and pending suggestions."""
