"""Shared code for every Hase phase."""
