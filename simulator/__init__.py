"""Capacity planner for hybrid-attention LLM serving (importable core; CPU only)."""

__version__ = "0.1.0"
