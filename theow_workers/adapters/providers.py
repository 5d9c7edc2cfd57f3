"""Which provider serves each configured model: the gateway the explorer talks to.

``llm`` is the primary model and ``llm_secondary`` the optional one that takes
over when it fails; each names its provider (``gemini/<id>`` or ``openai/<id>``
for any OpenAI-compatible chat-completions endpoint) and has its own endpoint
and key, so a Gemini primary may fall back to a model the team runs, or the
reverse. Each model is a core :class:`ToolLoop` over its provider's one-call
gateway, every request through the shared rate limiter.

>>> gateway = gateway_from_settings(Settings.load())  # doctest: +SKIP
>>> result = gateway.tool_session(prompt, offered(tools, granted), Budget())  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from celery.exceptions import SoftTimeLimitExceeded

from theow_client.config import port_problem, safe_url
from theow_workers.adapters.memory import InMemoryLimiter
from theow_workers.config import ConfigError, Settings
from theow_workers.core.llm.model import FallbackRunner, split_model
from theow_workers.core.llm.session import ToolLoop
from theow_workers.core.logs.redact import Masker, settings_secrets
from theow_workers.core.ports import ModelGateway, RateLimiter, Spending

PROVIDERS = ("gemini", "openai")


@dataclass(frozen=True)
class ModelSetting:
    """One configured model as its settings name it: ``setting`` is ``llm`` or ``llm_secondary``."""

    setting: str
    provider: str
    model: str
    base_url: str
    api_key: str

    @property
    def variable(self) -> str:
        return f"THEOW_{self.setting.upper()}"


def configured_models(settings: Settings) -> list[ModelSetting]:
    """The primary model and the secondary (if set), each checked: a bad one is a
    ConfigError naming its setting."""
    found = [_model(settings, "llm")]
    if settings.llm_secondary:
        found.append(_model(settings, "llm_secondary"))
    return found


def gateway_for(model: ModelSetting, timeout: float | None = None) -> ModelGateway:
    """The provider's one-call gateway for a configured model; ``timeout``: seconds a request
    may take (the provider's default when None)."""
    if model.provider == "openai":
        from theow_workers.adapters.openai_chat import REQUEST_TIMEOUT, OpenAIChatGateway

        return OpenAIChatGateway(
            model.model, model.base_url, model.api_key, timeout or REQUEST_TIMEOUT
        )
    from theow_workers.adapters.gemini import REQUEST_TIMEOUT_MS, GeminiGateway

    seconds = timeout or REQUEST_TIMEOUT_MS / 1000
    return GeminiGateway(model.model, model.api_key, model.base_url or None, timeout=seconds)


def gateway_from_settings(
    settings: Settings, limiter: RateLimiter | None = None, spend: Spending | None = None
) -> FallbackRunner:
    """The primary model (``llm``) with the optional secondary (``llm_secondary``).

    ``spend``: the fleet's daily cap (``llm_daily_budget``), which every request of
    either model reserves its most from before it is sent.
    """
    shared = limiter or InMemoryLimiter()
    mask = Masker(settings_secrets(settings))  # what tools return and turns record
    prices = settings.model_prices
    # A task's soft time limit ends the session; a tool must not turn it into an answer.
    loops = [
        ToolLoop(
            gateway_for(m, settings.llm_request_timeout),
            shared,
            interrupts=(SoftTimeLimitExceeded,),
            mask=mask,
            spend=spend,
            price=prices.get(f"{m.provider}/{m.model}", prices.get(m.model)),
            max_output_tokens=settings.llm_max_output_tokens,
            max_wait=settings.llm_max_wait_seconds,
        )
        for m in configured_models(settings)
    ]
    return FallbackRunner(loops[0], loops[1] if len(loops) > 1 else None)


def _model(settings: Settings, setting: str) -> ModelSetting:
    name: str = getattr(settings, setting)
    variable = f"THEOW_{setting.upper()}"
    try:
        provider, model = split_model(name)
    except ValueError as exc:
        raise ConfigError(f"setting {setting!r} ({variable}): {exc}") from None
    if provider not in PROVIDERS:
        raise ConfigError(
            f"setting {setting!r} ({variable}): provider {provider!r} is not supported"
            f" (gemini/<model>, or openai/<model> for an OpenAI-compatible endpoint)"
        )
    base_url: str = getattr(settings, f"{setting}_base_url")
    api_key: str = getattr(settings, f"{setting}_api_key").get_secret_value()
    if provider == "gemini":
        base_url = base_url or settings.gemini_base_url
        api_key = api_key or settings.gemini_api_key.get_secret_value()
    elif problem := _endpoint_problem(base_url):
        raise ConfigError(
            f"setting '{setting}_base_url' ({variable}_BASE_URL) {safe_url(base_url)!r}: {problem};"
            f" {name} needs its endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM),"
            " http://127.0.0.1:11434/v1 (Ollama), http://127.0.0.1:8080/v1 (llama.cpp)"
        )
    return ModelSetting(setting, provider, model, base_url, api_key)


def _endpoint_problem(url: str) -> str | None:
    if not url:
        return "not set"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http:// or https:// URL with a host"
    return port_problem(parts.netloc)
