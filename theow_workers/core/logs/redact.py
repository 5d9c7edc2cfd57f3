"""Secrets in facts are masked again on arrival, before anything is matched, stored or logged.

The client masks before a failure leaves the build agent (``theow_client.redact``);
the worker masks again, for old clients and for anything the client's short
list of token shapes does not know. Here the client's detectors run together
with the maintained plugins of detect-secrets (Yelp): every regex-based plugin
it ships (AWS, Artifactory, Azure storage, Cloudant, Discord, GitHub, GitLab,
IBM Cloud, JWT, Mailchimp, npm, OpenAI, PyPI, SendGrid, Slack, SoftLayer,
Square, Stripe, Telegram, Twilio, ...), their patterns run over the whole log
in one pass per plugin instead of line by line, and only on the lines that
hold one of the plugin's keywords (``PLUGIN_KEYWORDS``). A plugin added by a
later detect-secrets release runs on every line until it is given keywords.

>>> redact_text("curl https://bob:hunter2@example.com -H 'Authorization: Bearer abc.def.ghi123'")
"curl https://bob:***@example.com -H 'Authorization: Bearer ***'"
>>> redact_text("SOFTLAYER_API_KEY = " + "a1b2c3d4" * 8)
'SOFTLAYER_API_KEY = [masked:softlayer-credentials]'
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from functools import cache
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, SecretStr

from theow_client.jsontypes import Json, JsonObject
from theow_client.redact import MASK, SECRET_NAME, KeywordFinder, Redactor
from theow_client.secret_rules import DETECTORS, GITLAB_PREFIXES, Detector

__all__ = [
    "MASK",
    "SECRET_NAME",
    "Masker",
    "plugin_detectors",
    "redact",
    "redact_text",
    "redactor",
    "settings_secrets",
]

# Lowercase literals one of which every match of the plugin holds; they only
# decide which lines a plugin reads, never what it finds.
PLUGIN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "ArtifactoryDetector": ("akc", *(f"ap{c}" for c in "0123456789abcdef")),
    "AWSKeyDetector": ("a3t", "abia", "acca", "akia", "asia", "aws"),
    "AzureStorageKeyDetector": ("accountkey=",),
    # `cl_api_key =`, `cloudant-password:`: the plugin's prefix joined to its keyword.
    "CloudantDetector": tuple(
        f"{prefix}{dash}{word}"
        for prefix in ("cloudant", "cl", "clou")
        for dash in ("", "_", "-")
        for word in ("api", "key", "pw", "pass", "token")
    ),
    "DiscordBotTokenDetector": (),  # a token with no fixed part: every line
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "GitLabTokenDetector": (*GITLAB_PREFIXES, "gr1348941"),
    # The keyword right before a separator (`pass` alone is in every PASSED).
    "IbmCloudIamDetector": tuple(
        f"{word}{after}"
        for word in ("key", "pwd", "pass", "token")
        for after in ("=", ":", " ", '"', "'", "]")
    ),
    "IbmCosHmacDetector": ("secret",),
    "JwtTokenDetector": ("eyj",),
    "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",),
    "OpenAIDetector": ("t3blbkfj",),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",),
    "SlackDetector": ("xox", "hooks.slack.com"),
    "SoftlayerDetector": tuple(
        f"{prefix}{dash}{word}"
        for prefix in ("softlayer", "sl")
        for dash in ("", "_", "-")
        for word in ("api", "key", "pw", "pass", "token")
    ),
    "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",),
    "TelegramBotTokenDetector": (":aa",),  # bot tokens' secret part starts with AA
    "TwilioKeyDetector": (),  # a literal start (AC, SK): one pass is cheaper than any keyword
}
# Plugins built with detect-secrets' `build_assignment_regex`: an optional
# prefix (`ibm_cloud_iam_api`), the keyword, a separator and a secret of at
# most 64 characters lie within this reach of the keyword.
ASSIGNMENT_PLUGINS = frozenset(
    {"CloudantDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "SoftlayerDetector"}
)
ASSIGNMENT_REACH = (40, 160)
# An IP address is not a secret. The client's detectors mask the same spans as
# these two and keep more readable: a private key's BEGIN and END lines, the
# user of a URL's credentials (`https://bob:***@host`).
SKIPPED_PLUGINS = frozenset({"IPPublicDetector", "PrivateKeyDetector", "BasicAuthDetector"})


def _label(secret_type: str) -> str:
    """``'SoftLayer Credentials'`` -> ``'softlayer-credentials'``."""
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def plugin_detectors() -> list[Detector]:
    """One detector per regex of every regex-based detect-secrets plugin but the skipped ones."""
    # Imported here: detect-secrets takes 0.3 s to import, and every `theow` command
    # masks its log lines with this module.
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector

    detectors: list[Detector] = []
    plugins: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in sorted(plugins.items()):
        if not issubclass(plugin, RegexBasedDetector) or plugin.__name__ in SKIPPED_PLUGINS:
            continue
        keywords = PLUGIN_KEYWORDS.get(plugin.__name__, ())
        check = JwtTokenDetector.is_formally_valid if plugin is JwtTokenDetector else None
        reach = ASSIGNMENT_REACH if plugin.__name__ in ASSIGNMENT_PLUGINS else None
        for pattern in plugin().denylist:
            # The plugin's secret is its first group that took part, else the whole match.
            group: int | tuple[int, ...] = tuple(range(1, pattern.groups + 1)) or 0
            detectors.append(
                Detector(_label(secret_type), pattern, keywords, group, check, reach=reach)
            )
    return detectors


def hyperscan_finder(keywords: frozenset[str]) -> KeywordFinder:
    """Which keywords occur in a text, in one Hyperscan pass (about 0.1 ms on 64 KB).

    Testing each keyword with ``in`` costs some 4 ms per 64 KB for the worker's
    hundred-odd keywords, more than all the regexes that follow.
    """
    import hyperscan

    ordered = sorted(keywords)
    database = hyperscan.Database()
    database.compile(
        expressions=[k.encode() for k in ordered],
        ids=list(range(len(ordered))),
        elements=len(ordered),
        flags=hyperscan.HS_FLAG_SINGLEMATCH,
        literal=True,
    )
    lock = threading.Lock()  # one scratch space per database: one scan at a time

    def present(lowered: str) -> set[str]:
        found: set[str] = set()

        def on_match(keyword: int, start: int, end: int, flags: int, context: object) -> None:
            found.add(ordered[keyword])

        with lock:
            database.scan(lowered.encode("utf-8", "replace"), match_event_handler=on_match)
        return found

    return present


@cache
def redactor() -> Redactor:
    """The worker's redactor: the client's detectors, then detect-secrets' plugins."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:  # no wheel for this platform: the slower keyword test is as right
        return Redactor([*DETECTORS, *plugin_detectors()])
    return Redactor([*DETECTORS, *plugin_detectors()], finder=hyperscan_finder)


def redact_text(text: str) -> str:
    return redactor().redact_text(text)


def redact(facts: JsonObject) -> JsonObject:
    """A copy of ``facts`` with secret-named facts and secrets in text masked."""
    return redactor().redact(facts)


# A deployment's own secret shorter than this is not looked for: masking every
# "ab" would garble the text and says nothing about the secret anyway.
MIN_SECRET = 6
DEPLOYMENT_SECRET = "[masked:deployment-secret]"


def settings_secrets(settings: BaseModel) -> frozenset[str]:
    """Every secret value a deployment's settings hold: each ``SecretStr`` (the Gemini
    key, the console and Flower passwords, ...) and the password of each URL
    (database, Redis), as written and percent-decoded. Read from the settings'
    fields, so a secret setting added later is masked without a change here."""
    found: set[str] = set()
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value().strip())
        elif isinstance(value, str) and "://" in value:
            try:
                password = urlsplit(value).password
            except ValueError:  # a malformed URL holds no password we could name
                continue
            if password:
                found |= {password, unquote(password)}
    return frozenset(s for s in found if len(s) >= MIN_SECRET)


class Masker:
    """Masks text that a model or a tool wrote before anything stores or shows it.

    The deployment's own secret values first (a model that read the worker's
    environment repeats them verbatim), then every secret rule of ``redact_text``.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret that contains another is masked whole.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, DEPLOYMENT_SECRET)
        return redact_text(text)

    def __call__(self, value: Json) -> Json:
        """``value`` (text, or JSON-like lists and dicts of it) with every string masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(item) for item in value]
        return value
