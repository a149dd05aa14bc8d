"""All I/O of PersonaLab: SQLModel tables and queries, vectors, checkpointers."""
