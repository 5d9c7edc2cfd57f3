"""Forge integrations: webhook intake (``hooks``, ``intake``) and pull-request feedback."""
