"""The Alembic environment of PersonaLab's database (issue 14): env.py and the revisions in versions/.

Run through `personalab.stores.migrate` (`personalab db upgrade|current`), which passes the connection in."""
