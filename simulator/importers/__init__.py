"""Family readers for ``simulator.model_import``, one module per architecture family.

Each module exposes reader functions ``(cfg, notes) -> dict`` (the card fields its family
defines) that ``simulator.model_import`` registers by ``model_type``.
"""
