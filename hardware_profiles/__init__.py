"""Hardware profiles as data: ``<device>/profile.yaml`` (+ measurements, latency models later)."""

from pathlib import Path

PROFILES_DIR = Path(__file__).resolve().parent
