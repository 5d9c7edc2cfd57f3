"""Which secrets model text is masked for: every secret the deployment's settings hold."""

from __future__ import annotations

from theow_workers.config import Settings
from theow_workers.core.logs.redact import Masker, settings_secrets


def test_the_database_and_broker_passwords_in_urls_are_masked_as_written_and_decoded(tmp_path):
    settings = Settings.load(env={
        "THEOW_HOME": str(tmp_path),
        "THEOW_DATABASE_URL": "postgresql+psycopg://theow:s3cret%40db-42@db.internal/theow",
        "THEOW_REDIS_URL": "redis://:broker-pass-77@cache.internal:6379/0",
        "GEMINI_API_KEY": "AIzaSy-masking-test-0123456789",
        "THEOW_FLOWER_PASSWORD": "flower-watch-word-3",
    })  # fmt: skip
    mask = Masker(settings_secrets(settings))
    said = (
        "I printed the environment: s3cret%40db-42 decodes to s3cret@db-42, the broker's is "
        "broker-pass-77, Flower's flower-watch-word-3, the key AIzaSy-masking-test-0123456789."
    )
    shown = mask.text(said)
    for secret in ("s3cret%40db-42", "s3cret@db-42", "broker-pass-77", "flower-watch-word-3",
                   "AIzaSy-masking-test-0123456789"):  # fmt: skip
        assert secret not in shown
    assert shown.count("[masked:deployment-secret]") == 5
    assert shown.startswith("I printed the environment: ")
