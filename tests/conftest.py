"""Test settings: plotting off-screen, transformers offline (the course never reaches a model hub)."""
import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
