"""Baseline: the schema of PersonaLab before migrations (commit 949b958), as its create_all made it.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "background",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", AutoString(), nullable=False),
        sa.Column("world_setting", AutoString(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "role",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", AutoString(), nullable=False),
        sa.Column("description", AutoString(), nullable=False),
        sa.Column("avatar", AutoString(), nullable=True),
        sa.Column("persona", AutoString(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "outline_point",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("background_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("content", AutoString(), nullable=False),
        sa.ForeignKeyConstraint(
            ["background_id"],
            ["background.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_outline_point_background_id"), "outline_point", ["background_id"], unique=False)
    op.create_table(
        "save",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("title", AutoString(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=True),
        sa.Column("background_id", sa.Integer(), nullable=True),
        sa.Column("last_message_id", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["background_id"],
            ["background.id"],
        ),
        sa.ForeignKeyConstraint(
            ["role_id"],
            ["role.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_save_background_id"), "save", ["background_id"], unique=False)
    op.create_index(op.f("ix_save_role_id"), "save", ["role_id"], unique=False)
    op.create_table(
        "knowledge_entry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tag", AutoString(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("keywords", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("user_edited", sa.Boolean(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=True),
        sa.Column("save_id", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["role_id"],
            ["role.id"],
        ),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_knowledge_entry_role_id"), "knowledge_entry", ["role_id"], unique=False)
    op.create_index(op.f("ix_knowledge_entry_save_id"), "knowledge_entry", ["save_id"], unique=False)
    op.create_table(
        "line",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("original_emotion", AutoString(), nullable=True),
        sa.Column("predicted_emotion", AutoString(), nullable=True),
        sa.Column("content", AutoString(), nullable=False),
        sa.Column("tts_content", AutoString(), nullable=True),
        sa.Column("action_content", AutoString(), nullable=True),
        sa.Column("audio_file", AutoString(), nullable=True),
        sa.Column("attribute", AutoString(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=True),
        sa.Column("script_role_id", AutoString(), nullable=True),
        sa.Column("display_name", AutoString(), nullable=True),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("parent_line_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["parent_line_id"],
            ["line.id"],
        ),
        sa.ForeignKeyConstraint(
            ["role_id"],
            ["role.id"],
        ),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_line_parent_line_id"), "line", ["parent_line_id"], unique=False)
    op.create_index(op.f("ix_line_save_id"), "line", ["save_id"], unique=False)
    op.create_table(
        "memory_entry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.Integer(), nullable=False),
        sa.Column("character_id", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("type", AutoString(), nullable=False),
        sa.Column("layer", AutoString(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("activity", sa.Float(), nullable=False),
        sa.Column("activity_turn", sa.Integer(), nullable=False),
        sa.Column("layer_since_turn", sa.Integer(), nullable=False),
        sa.Column("related_character", AutoString(), nullable=False),
        sa.Column("location", AutoString(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("keywords", sa.JSON(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("user_edited", sa.Boolean(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("notes", AutoString(), nullable=False),
        sa.Column("mention_count", sa.Integer(), nullable=False),
        sa.Column("last_mentioned_turn", sa.Integer(), nullable=True),
        sa.Column("last_mentioned_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_memory_entry_instance_id"), "memory_entry", ["instance_id"], unique=False)
    op.create_index("ix_memory_entry_scope", "memory_entry", ["instance_id", "character_id", "layer"], unique=False)
    op.create_table(
        "memory_index_state",
        sa.Column("instance_id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    op.create_table(
        "play_session",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_play_session_save_id"), "play_session", ["save_id"], unique=False)
    op.create_table(
        "plot_node",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("level", AutoString(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("save_id", "turn", name="uq_plot_node_save_turn"),
    )
    op.create_index(op.f("ix_plot_node_save_id"), "plot_node", ["save_id"], unique=False)
    op.create_table(
        "story_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("reply_line_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_story_state_save_id"), "story_state", ["save_id"], unique=False)
    op.create_table(
        "turn_lock",
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("token", AutoString(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("save_id"),
    )
    op.create_table(
        "turn_record",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("user_line_id", sa.Integer(), nullable=True),
        sa.Column("reply_line_id", sa.Integer(), nullable=True),
        sa.Column("status", AutoString(), nullable=False),
        sa.Column("error", AutoString(), nullable=True),
        sa.Column("model", AutoString(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_turn_record_save_id"), "turn_record", ["save_id"], unique=False)
    op.create_table(
        "worldbook_entry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", AutoString(), nullable=True),
        sa.Column("title", AutoString(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("keywords", sa.JSON(), nullable=False),
        sa.Column("secondary_keywords", sa.JSON(), nullable=False),
        sa.Column("selective_logic", AutoString(), nullable=False),
        sa.Column("trigger_type", AutoString(), nullable=False),
        sa.Column("kind", AutoString(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("constant", sa.Boolean(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("position", AutoString(), nullable=True),
        sa.Column("relevance_weight", sa.Float(), nullable=False),
        sa.Column("emotional_weight", sa.Float(), nullable=False),
        sa.Column("time_decay_factor", sa.Float(), nullable=False),
        sa.Column("emotions", sa.JSON(), nullable=False),
        sa.Column("min_turn", sa.Integer(), nullable=True),
        sa.Column("max_turn", sa.Integer(), nullable=True),
        sa.Column("min_gap_seconds", sa.Float(), nullable=True),
        sa.Column("max_gap_seconds", sa.Float(), nullable=True),
        sa.Column("min_turns_since_fired", sa.Integer(), nullable=True),
        sa.Column("role_id", sa.Integer(), nullable=True),
        sa.Column("save_id", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["role_id"],
            ["role.id"],
        ),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_worldbook_entry_role_id"), "worldbook_entry", ["role_id"], unique=False)
    op.create_index(op.f("ix_worldbook_entry_save_id"), "worldbook_entry", ["save_id"], unique=False)
    op.create_table(
        "worldbook_suggestion",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("save_id", sa.Integer(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("choice_level", AutoString(), nullable=True),
        sa.Column("title", AutoString(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("keywords", sa.JSON(), nullable=False),
        sa.Column("trigger_type", AutoString(), nullable=False),
        sa.Column("kind", AutoString(), nullable=False),
        sa.Column("scope", AutoString(), nullable=False),
        sa.Column("status", AutoString(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("decided_at", UTCDateTime(), nullable=True),
        sa.Column("worldbook_entry_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["save_id"],
            ["save.id"],
        ),
        sa.ForeignKeyConstraint(["worldbook_entry_id"], ["worldbook_entry.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_worldbook_suggestion_save_id"), "worldbook_suggestion", ["save_id"], unique=False)
    op.create_index(op.f("ix_worldbook_suggestion_status"), "worldbook_suggestion", ["status"], unique=False)


def downgrade() -> None:
    op.drop_table("worldbook_suggestion")
    op.drop_table("worldbook_entry")
    op.drop_table("turn_record")
    op.drop_table("turn_lock")
    op.drop_table("story_state")
    op.drop_table("plot_node")
    op.drop_table("play_session")
    op.drop_table("memory_index_state")
    op.drop_table("memory_entry")
    op.drop_table("line")
    op.drop_table("knowledge_entry")
    op.drop_table("save")
    op.drop_table("outline_point")
    op.drop_table("role")
    op.drop_table("background")
