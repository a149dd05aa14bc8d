"""Serving PersonaLab's graph on a production engine (issue 27; docs/deployment.md "Production serving on Aegra")."""
