"""Alembic revisions of PersonaLab's database, oldest first (0001_baseline: the schema before migrations)."""
