"""The Python API a host app uses: characters, backgrounds, instances, dialogue (seed 002 功能需求).

`personalab.graph.api.library`: characters, backgrounds and instances (create, list, show, edit, delete, export,
import); its names are re-exported here."""

from personalab.graph.api.library import *  # noqa: F403
from personalab.graph.api.library import __all__ as _library_names

__all__ = [*_library_names]
