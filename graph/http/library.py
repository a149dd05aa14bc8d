"""Characters, backgrounds and instances over HTTP (seed 002 角色/背景/会话实例): thin over personalab.graph.api.library."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
