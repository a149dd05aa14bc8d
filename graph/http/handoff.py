"""`POST /local/turn`: a turn handed over by `personalab turn` of the same data folder (issue 29; graph/api/handoff.py
says both sides). Only a caller holding the token of `<data folder>/local-server.json` (which `personalab serve`
writes, readable by its user only) is answered; anyone else gets 403. The answer streams newline-delimited JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from personalab.graph.api import handoff
from personalab.nodes.rules.errors import InvalidInput
from starlette.concurrency import run_in_threadpool

router = APIRouter()


@router.post(handoff.PATH, include_in_schema=False)
async def local_turn(request: Request) -> Any:
    token = request.headers.get(handoff.TOKEN_HEADER, "")
    if not await run_in_threadpool(handoff.token_accepted, token):
        return JSONResponse({"detail": "not this data folder's local token"}, status_code=403)
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise InvalidInput("body: not JSON") from None
    events: Iterator[dict[str, Any]] = handoff.handed_turn_events(body)  # InvalidInput (422) before the stream

    async def lines() -> AsyncIterator[bytes]:
        while (event := await run_in_threadpool(next, events, None)) is not None:
            yield json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"Cache-Control": "no-cache"})
