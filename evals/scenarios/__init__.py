"""Scenario files for batch evaluation runs (`personalab eval run`), shipped with the package."""
