"""Log lines as text or as one JSON object per line (``THEOW_LOG_FORMAT=json``).

The same two pieces serve the CLI (``cli.main``) and Celery workers (the
``after_setup_logger`` / ``after_setup_task_logger`` hooks in ``celery_app``):

* ``JsonFormatter``: ``{"time", "level", "logger", "message", ...}`` on one line,
  with the task id and name inside a Celery task and the traceback as ``exc``.
* ``SecretFilter``: masks, in every record and whatever the format, the
  configured secrets (LLM key, Flower password, passwords in service URLs) and
  anything that looks like a token (``core.logs.redact``).

>>> handler = logging.StreamHandler()
>>> configure_handler(handler, "json", secrets=["hunter2"])
>>> handler.format(logging.makeLogRecord({"msg": "x"}))[:9]
'{"time": '
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from theow_client.jsontypes import JsonObject
from theow_workers.config import Settings
from theow_workers.core.logs.redact import MASK, SECRET_NAME, redact_text

if TYPE_CHECKING:
    from celery.apps.worker import Worker

FORMATS = ("text", "json")
TEXT_FORMAT = "%(name)s: %(message)s"
# Shorter values are too likely to occur in ordinary text to be masked on sight.
MIN_SECRET_LENGTH = 4
# Attributes every LogRecord has: whatever else a record carries came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "task_id",
    "task_name",
}


class LogFormatError(ValueError):
    pass


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise LogFormatError(f"setting 'log_format': {name!r} is not one of {', '.join(FORMATS)}")
    return name


def secrets_of(settings: Settings) -> list[str]:
    """The values of ``settings`` that must never appear in a log line."""
    found = [
        settings.gemini_api_key.get_secret_value(),
        settings.llm_api_key.get_secret_value(),
        settings.llm_secondary_api_key.get_secret_value(),
        settings.flower_password.get_secret_value(),
    ]
    for url in (settings.redis_url, settings.database_url, settings.milvus_uri):
        try:
            password = urlparse(url).password
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
    return sorted({s for s in found if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


class SecretFilter(logging.Filter):
    """Masks secrets in a record's message (and its traceback) before any handler formats it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if len(s) >= MIN_SECRET_LENGTH]

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return redact_text(text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.mask(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self.mask(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    ``task_context`` adds the running Celery task's id and name (worker pool processes).
    """

    def __init__(self, task_context: bool = False) -> None:
        super().__init__()
        self.task_context = task_context

    def format(self, record: logging.LogRecord) -> str:
        data: JsonObject = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.processName,
        }
        data.update(self._task(record))
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = MASK if SECRET_NAME.search(key) else value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=False, default=str)

    def _task(self, record: logging.LogRecord) -> dict[str, str]:
        task_id = getattr(record, "task_id", None)
        task_name = getattr(record, "task_name", None)
        if task_id is None and self.task_context:
            from celery._state import get_current_task

            task = get_current_task()
            if task is not None and task.request.id is not None:
                task_id, task_name = task.request.id, task.name
        return {"task_id": str(task_id), "task_name": str(task_name)} if task_id else {}


def configure_handler(
    handler: logging.Handler,
    log_format: str,
    secrets: Iterable[str] = (),
    task_context: bool = False,
) -> None:
    """Give ``handler`` the secret filter, and the JSON formatter when asked for."""
    if check_format(log_format) == "json":
        handler.setFormatter(JsonFormatter(task_context=task_context))
    if not any(isinstance(f, SecretFilter) for f in handler.filters):
        handler.addFilter(SecretFilter(secrets))


def configure_logger(
    logger: logging.Logger, settings: Settings, task_context: bool = False
) -> None:
    """Every handler of ``logger`` (a Celery worker's root or task logger)."""
    secrets = secrets_of(settings)
    for handler in logger.handlers:
        configure_handler(handler, settings.log_format, secrets, task_context)


def prepare_worker(worker: Worker, settings: Settings) -> None:
    """Before Celery configures logging: with JSON logs, no free-text banner, and
    warnings (e.g. Celery's privilege check) go through a JSON handler.

    Celery replaces the root handler installed here with its own moments later.
    Its signal handlers' one-line notices ("worker: Warm shutdown (MainProcess)")
    are written straight to the file descriptor and stay text.
    """
    if settings.log_format != "json":
        return
    worker.quiet = True
    logging.captureWarnings(True)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        configure_handler(handler, "json", secrets_of(settings))
        root.addHandler(handler)


def setup_cli_logging(level: str) -> None:
    """``logging.basicConfig`` for the ``theow`` command, in the configured format.

    A configuration error is left for the command itself to report; logs stay text.
    """
    from theow_workers.config import ConfigError

    try:
        settings: Settings | None = Settings.load()
    except ConfigError:
        settings = None
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    log_format = settings.log_format if settings and settings.log_format in FORMATS else "text"
    configure_handler(handler, log_format, secrets_of(settings) if settings else ())
    logging.basicConfig(level=level, handlers=[handler])
