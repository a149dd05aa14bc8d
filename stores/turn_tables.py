"""Tables of the turn graph (seed 002): turn records, core-memory versions."""
