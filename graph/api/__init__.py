"""The Python API a host app uses: characters, backgrounds, instances, dialogue (seed 002 功能需求)."""
