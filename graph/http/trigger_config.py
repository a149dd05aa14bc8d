"""Seed 004's trigger configuration over HTTP (issue 23): thin over `api.trigger_config`.

| method and path | what it does |
| --- | --- |
| `GET /trigger-config` | the scope's configuration: set there, in effect, and each field's source |
| `PUT /trigger-config` | set fields (`{"semantic_similarity": false, "max_per_type": {"goal": 2}}`; null unsets) |
| `DELETE /trigger-config` | unset everything set on the scope |

Scope: `?instance_id=`, `?character_id=`, neither (global: the operator's; a signed-in user names one of theirs).
A bad value → 422 naming the field; another user's id → 404.
"""

from __future__ import annotations

from fastapi import APIRouter
from personalab.graph.api.schemas.trigger_config import TriggerConfigPublic, TriggerConfigUpdate
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, QueryId
from pydantic import StrictBool

router = APIRouter(route_class=LimitedBodyRoute, tags=["trigger-config"])


@router.get("/trigger-config")
def get_trigger_config(api: Api, character_id: QueryId = None, instance_id: QueryId = None) -> TriggerConfigPublic:
    return api.trigger_config.get(character_id=character_id, instance_id=instance_id)


@router.put("/trigger-config")
def put_trigger_config(
    api: Api,
    body: TriggerConfigUpdate,
    character_id: QueryId = None,
    instance_id: QueryId = None,
    clear: StrictBool = False,
) -> TriggerConfigPublic:
    """Set the fields the body names (null unsets one); `?clear=true` unsets the rest of the scope first."""
    changes = body.model_dump(mode="json", exclude_unset=True)
    return api.trigger_config.set(changes, character_id=character_id, instance_id=instance_id, clear=clear)


@router.delete("/trigger-config")
def delete_trigger_config(api: Api, character_id: QueryId = None, instance_id: QueryId = None) -> TriggerConfigPublic:
    return api.trigger_config.reset(character_id=character_id, instance_id=instance_id)
