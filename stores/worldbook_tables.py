"""Tables of the world book and the knowledge library (seeds 004 / 001 常识知识库)."""
