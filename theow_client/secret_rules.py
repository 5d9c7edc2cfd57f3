"""What the client masks: named values, keys, headers, webhooks and token shapes.

Each entry is a ``Detector``; ``theow_client.redact`` runs them. The named-value
detectors carry most of the weight: a password is any string, so it is found
by what names it (``DB_PASS=``, ``"password": "…"``, ``--password``,
``mysql -p…``), not by its shape. Token shapes are the prefixes providers
publish for their own keys, so a shape can be matched on sight; each has a
sample in ``benchmarks/masking.py`` that must be masked.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

Group = int | str | tuple[int | str, ...]


@dataclass(frozen=True)
class Detector:
    """One kind of secret: where it is in a text, and what to call it once masked.

    ``label`` names the secret (``github-token`` becomes ``[masked:github-token]``);
    an empty label masks the value as ``***`` and keeps the name that precedes
    it. ``group`` is the part of a match that is masked. ``keywords`` are
    lowercase literals, one of which every match contains: the pattern runs
    only on a text holding one. ``check``, when given, must accept the masked
    value (an entropy or format test the regex cannot express). A detector
    whose matches never cross a line runs only on the lines holding a keyword,
    or, with ``reach=(before, after)``, only on that many characters around
    each keyword (a match starts at most ``before`` characters ahead of its
    keyword and ends at most ``after`` past it; long log lines are common).
    ``multiline`` ones run on the whole text.
    """

    label: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...]
    group: Group = 0
    check: Callable[[str], bool] | None = None
    multiline: bool = False
    reach: tuple[int, int] | None = None


def entropy(value: str) -> float:
    """Shannon entropy in bits per character.

    >>> entropy("aaaa"), round(entropy("ab"), 1)
    (0.0, 1.0)
    """
    if not value:
        return 0.0
    counts = Counter(value)
    total = len(value)
    return 0.0 - sum(n / total * math.log2(n / total) for n in counts.values())


def looks_random(value: str) -> bool:
    """A value that could be a generated token rather than a word or a number.

    >>> looks_random("unexpected"), looks_random("4096"), looks_random("d41d8cd98f00b204e980")
    (False, False, True)
    """
    if len(value) < 8 or value.isdigit():
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    if classes >= 2 and any(c.isdigit() for c in value):
        return entropy(value) >= 2.5
    return len(value) >= 20 and entropy(value) >= 4.0


# A quoted value (the same quote, optionally backslash-escaped as in JSON inside
# JSON, on both sides) or a bare one up to whitespace or punctuation.
VALUE = (
    r"(?:(?P<q>\\?[\"'])(?P<quoted>[^\n]{1,200}?)(?P=q)"
    r"|(?P<bare>[^\s'\"`,;&<>(){}\[\]:][^\s'\"`,;&<>(){}\[\]]*))"
)
PLACEHOLDER = re.compile(
    r"\*+|x{3,}|X{3,}|\$\{?\w+\}?|\$\{\{.*\}\}|\{\{.*\}\}|<[^>]*>|%\w+%|\$\(.*\)"
    # an environment variable's name, as in `server-password: GITHUB_TOKEN`
    r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
    r"|(?i:[\[(]?(?:null|none|nil|true|false|undefined|empty|no|redacted|hidden|masked|filtered"
    r"|secure|n/a)[\])]?|-+)"
)

# Names whose value is a secret whatever it looks like. A name is matched from
# its telling word on (`DB_` of `DB_PASSWORD` may be anything), which lets the
# regex engine skip every position that cannot start such a word.
# (`DB_PASS` and `DB_PWD`, but not `PASS: test_x` nor the working directory `PWD`.)
PASSWORD_NAME = r"(?:passw(?:or)?d|passwd|passphrase|(?<=[_.-])(?:pass|pwd)\b)[\w.-]*"
# Names whose value is a secret when it looks generated (a ``token: invalid`` is a word).
TOKEN_NAME = (
    r"(?:(?:secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth[_-]?key"
    r"|signing[_-]?key|encryption[_-]?key|master[_-]?key|client[_-]?key|credential"
    r"|(?-i:_KEY\b))[\w.-]*|(?<![\w.-])(?:sig|signature|x-amz-signature))"
)
SEPARATOR = r"[\"']?\\?[\"']?[ \t]*(?:=|:=|=>|:(?!:))[ \t]*"


def _not_placeholder(value: str) -> bool:
    return PLACEHOLDER.fullmatch(value.strip()) is None


def _password_value(value: str) -> bool:
    # `tries to enter a password: 3` is a count; a password is longer than that.
    return _not_placeholder(value) and not (value.isdigit() and len(value) < 6)


PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@-]+){2,}/?")


def _is_path(value: str) -> bool:
    # Where a key lives (`--tls_client_key=/home/agent/engflow.key`), not the key; base64
    # holds slashes too, but its pieces look generated.
    if PATH.fullmatch(value) is None:
        return False
    return not any(looks_random(part) for part in value.split("/"))


def _token_value(value: str) -> bool:
    return _not_placeholder(value) and not _is_path(value) and looks_random(value.strip())


def _basic_credentials(value: str) -> bool:
    # Basic auth is base64("user:password"): checking the colon keeps words out.
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _named(
    label: str,
    name: str,
    keywords: tuple[str, ...],
    check: Callable[[str], bool],
    before: int,
) -> list[Detector]:
    """``name=value`` / ``name: "value"`` / ``"name": "value"`` / ``<name>value</name>``."""
    assignment = re.compile(rf"(?i)(?P<name>{name}){SEPARATOR}{VALUE}")
    element = re.compile(rf"(?i)<(?P<tag>[\w.-]*?{name})>(?P<value>[^<\n]{{1,200}})</(?P=tag)>")
    return [
        Detector(
            label, assignment, keywords, ("quoted", "bare"), check, reach=(before, NAMED_REACH)
        ),
        Detector(label, element, ("</",), "value", check),
    ]


def _shape(label: str, pattern: str, *keywords: str, flags: int = 0) -> Detector:
    return Detector(label, re.compile(pattern, flags), tuple(k.lower() for k in keywords))


_NOT_A_VALUE = r"(?!-(?:file|path|dir|stdin|env|var|name|length|type|prompt))"
_PASSWORD_ARGUMENT = rf"[\w-]*(?:password|passwd|passphrase){_NOT_A_VALUE}[\w-]*"
_TOKEN_ARGUMENT = (
    r"[\w-]*(?:token|secret|api-?key|access-key|secret-key|private-key|auth-key|client-secret)"
    rf"{_NOT_A_VALUE}[\w-]*"
)
# The words a secret's name starts with (a match starts at its keyword), and how
# far a name, its separator and a quoted value reach past it.
# (Not `pass` alone: test logs say PASSED thousands of times.)
PASSWORD_KEYWORDS = ("passw", "passphrase", "_pass", ".pass", "-pass", "_pwd", ".pwd", "-pwd")
TOKEN_KEYWORDS = (
    "secret",
    "token",
    "credential",
    "_key",
    "-key",
    "apikey",
    "accesskey",
    "privatekey",
    "authkey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "clientkey",
    "sig=",
    "sig:",
    'sig"',
    "sig'",
    "signature",
)
NAMED_REACH = 400
ARGUMENT_REACH = (60, NAMED_REACH)

NAMED = [
    # (`_pass` starts a character before the name; `encryption_key` 10 before `_key`.)
    *_named("", PASSWORD_NAME, PASSWORD_KEYWORDS, _password_value, before=1),
    *_named("", TOKEN_NAME, TOKEN_KEYWORDS, _token_value, before=14),
]

ARGUMENTS = [
    # --password X, --password=X, --api-key 'X' (not --password-stdin, --token-file F);
    # a password is any value, a token one that looks generated (`--secret=db-cert` is a name).
    Detector(
        "",
        re.compile(rf"(?i)(?<![\w-])--?(?:{_PASSWORD_ARGUMENT})(?:=|[ \t]+)(?!-){VALUE}"),
        ("passw", "passphrase"),
        ("quoted", "bare"),
        _password_value,
        reach=ARGUMENT_REACH,
    ),
    Detector(
        "",
        re.compile(rf"(?i)(?<![\w-])--?(?:{_TOKEN_ARGUMENT})(?:=|[ \t]+)(?!-){VALUE}"),
        ("token", "secret", "key"),
        ("quoted", "bare"),
        _token_value,
        reach=ARGUMENT_REACH,
    ),
    # mysql -pX (attached: `mysql -p X` would prompt, X being the database).
    Detector(
        "",
        re.compile(
            r"(?i)\b(?:mysql\w*|mariadb[\w-]*)\b[^\n]*?[ \t]-p(?P<v>[^\s'\"]+|'[^'\n]*'|\"[^\"\n]*\")"
        ),
        ("mysql", "mariadb"),
        "v",
        _not_placeholder,
    ),
    # docker/podman/helm/oras/... login -p X, sshpass -p X
    Detector(
        "",
        re.compile(
            r"(?i)\b(?:login|sshpass)\b[^\n]*?[ \t]-p(?:[ \t]+|=)?"
            r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"-][^\s'\"]*)"
        ),
        ("login", "sshpass"),
        "v",
        _not_placeholder,
    ),
    # curl -u user:password, --user user:password (not -u 1000:1000).
    Detector(
        "",
        re.compile(r"(?:(?<=\s)|^)(?:-u|--user)(?:[ \t]+|=)['\"]?[^\s:'\"]+:(?P<v>[^\s'\"]+)"),
        ("-u",),
        "v",
        lambda value: not value.isdigit() and _not_placeholder(value),
        reach=(1, 300),
    ),
]

KEYS_AND_HEADERS = [
    # A private key's body, up to its END line.
    Detector(
        "private-key",
        re.compile(
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:\\n|\s)*(?P<body>[\s\S]{1,20000}?)"
            r"(?:\\n|\s)*(?=-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)"
        ),
        ("private key",),
        "body",
        multiline=True,
    ),
    # ... or, with no END line (the log was cut), the base64 lines after BEGIN.
    Detector(
        "private-key",
        re.compile(
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:\\n|\s)*"
            r"(?P<body>(?:(?:Proc-Type|DEK-Info|Comment): [^\n\\]*(?:\\n|\s)+)*"
            r"[A-Za-z0-9+/=]{16,}(?:(?:\\r|\\n|\s)+[A-Za-z0-9+/=]{16,})*)"
        ),
        ("private key",),
        "body",
        multiline=True,
    ),
    # ... or, with no BEGIN line (the log starts inside the key, or the bound cut it
    # off), the base64 lines before END.
    Detector(
        "private-key",
        re.compile(
            r"(?:\A|\.\.\.\]\n)(?:\\n|\s)*(?P<body>[A-Za-z0-9+/=\s\\]{16,20000}?)"
            r"(?:\\n|\s)*-----END[ A-Z0-9]*PRIVATE KEY"
        ),
        ("private key",),
        "body",
        multiline=True,
    ),
    # Authorization: Bearer|token|Basic X (the scheme stays readable), or a bare credential.
    # Not a path such as Rust's ``auth::authorization::name`` (``::`` is no separator).
    Detector(
        "",
        re.compile(
            r"(?i)\b(?:proxy-)?authorization\\?[\"']?[ \t]*[:=](?![:=])[ \t]*\\?[\"']?"
            r"(?:(?:bearer|basic|token|bot|apikey|api-key|key|sso-key|jwt|otp|gitlab-ci-token)"
            r"[ \t]+)?(?P<v>[^\s'\"\\,]+(?:,[ \t]*[^\s'\"\\,]+)*)"
        ),
        ("authorization",),
        "v",
        _not_placeholder,
    ),
    Detector(
        "",
        re.compile(r"(?i)\b(?:bearer|token)[ \t]+(?P<v>[\w.~+/=-]{16,})"),
        ("bearer", "token"),
        "v",
        looks_random,
    ),
    Detector(
        "",
        re.compile(r"(?i)\bbasic[ \t]+(?P<v>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"),
        ("basic",),
        "v",
        _basic_credentials,
    ),
]

URLS = [
    # scheme://user:password@host keeps the user; scheme://TOKEN@host masks the token.
    # (Brackets are percent-encoded in a URL's user info: `[masked:…]` is never one. An
    # `@` often is not: the password runs to the last `@` before the host.)
    Detector(
        "",
        re.compile(r"://[^\s/@:'\"\[\]]*:(?P<v>[^\s/'\"\[\]]+)@"),
        ("://",),
        "v",
        _not_placeholder,
    ),
    Detector(
        "",
        re.compile(r"://(?P<v>[^\s/@:'\"\[\]]{16,})@"),
        ("://",),
        "v",
        looks_random,
    ),
    _shape(
        "slack-webhook",
        r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[\w+/-]{8,}",
        "hooks.slack.com",
    ),
    _shape(
        "discord-webhook",
        r"(?<=/webhooks/)\d{5,}/[\w-]{20,}",
        "discord",
    ),
    _shape(
        "teams-webhook",
        r"(?i)(?<=\.webhook\.office\.com/)webhookb2/[^\s'\"<>]+"
        r"|(?<=outlook\.office\.com/)webhook/[^\s'\"<>]+"
        r"|(?<=outlook\.office365\.com/)webhook/[^\s'\"<>]+"
        r"|(?<=\.logic\.azure\.com)(?::443)?/workflows/[^\s'\"<>]+",
        "office.com",
        "office365.com",
        "logic.azure.com",
    ),
    _shape(
        "google-chat-webhook",
        r"(?<=chat\.googleapis\.com/v1/spaces/)[^\s'\"<>]+",
        "chat.googleapis.com",
    ),
]

_END = r"(?![\w-])"
GITLAB_PREFIXES = tuple(
    f"gl{kind}-"
    for kind in ("pat", "dt", "rt", "ptt", "ft", "imt", "agent", "oas", "cbt", "soat", "ffct")
)
# The distinctive prefixes whose shortened forms are still masked.
TRUNCATED_KEYWORDS = (
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "npm_",
    "hf_",
    "xox",
    "sk-",
)
TRUNCATED_PREFIXES = r"(?:gh[pousr]_|github_pat_|glpat-|npm_|hf_|xox[abposre]-|sk-)"
# fmt: off
TOKEN_SHAPES = [
    _shape("github-token", rf"\bgh[pousr]_[A-Za-z0-9]{{30,}}{_END}", "gh"),
    _shape("github-token", rf"\bgithub_pat_[A-Za-z0-9_]{{40,}}{_END}", "github_pat_"),
    _shape("gitlab-token", rf"\bgl(?:pat|dt|rt|ptt|ft|imt|agent|oas|cbt|soat|ffct)-[\w-]{{20,}}{_END}", *GITLAB_PREFIXES),
    _shape("npm-token", rf"\bnpm_[A-Za-z0-9]{{36}}{_END}", "npm_"),
    _shape("aws-access-key", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b", "a3t", "akia", "asia", "abia", "acca"),
    _shape("slack-token", rf"\bxox[abposre]-[A-Za-z0-9-]{{10,}}{_END}", "xox"),
    _shape("slack-token", rf"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+{_END}", "xapp-"),
    _shape("google-api-key", rf"\bAIza[0-9A-Za-z_-]{{35}}{_END}", "aiza"),
    _shape("google-oauth-token", rf"\bya29\.[0-9A-Za-z_-]{{20,}}{_END}", "ya29."),
    _shape("openai-key", rf"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{{20,}}{_END}", "sk-"),
    _shape("anthropic-key", rf"\bsk-ant-[a-z0-9]+-[A-Za-z0-9_-]{{40,}}{_END}", "sk-ant-"),
    _shape("stripe-key", rf"\b[rsp]k_(?:live|test)_[0-9a-zA-Z]{{20,}}{_END}", "k_live_", "k_test_"),
    _shape("stripe-webhook-secret", rf"\bwhsec_[0-9a-zA-Z]{{24,}}{_END}", "whsec_"),
    _shape("sendgrid-key", rf"\bSG\.[\w-]{{16,}}\.[\w-]{{30,}}{_END}", "sg."),
    _shape("pypi-token", rf"\bpypi-AgE[A-Za-z0-9_-]{{50,}}{_END}", "pypi-"),
    _shape("huggingface-token", rf"\bhf_[A-Za-z0-9]{{30,}}{_END}", "hf_"),
    _shape("digitalocean-token", rf"\bdo[porc]_v1_[a-f0-9]{{64}}{_END}", "_v1_"),
    _shape("shopify-token", rf"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{{32}}{_END}", "shp"),
    _shape("docker-hub-token", rf"\bdckr_(?:pat|oat)_[\w-]{{20,}}{_END}", "dckr_"),
    _shape("vault-token", rf"\bhv[sbr]\.[\w-]{{24,}}{_END}", "hvs.", "hvb.", "hvr."),
    _shape("doppler-token", rf"\bdp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{{30,}}{_END}", "dp."),
    _shape("postman-key", rf"\bPMAK-[a-f0-9]{{24}}-[a-f0-9]{{34}}{_END}", "pmak-"),
    _shape("grafana-token", rf"\bgl(?:c|sa)_[A-Za-z0-9+/=_-]{{32,}}{_END}", "glc_", "glsa_"),
    _shape("newrelic-key", rf"\bNR(?:AK|II|JS)-[A-Za-z0-9]{{27,}}{_END}", "nrak-", "nrii-", "nrjs-"),
    _shape("linear-key", rf"\blin_(?:api|oauth)_[A-Za-z0-9]{{40}}{_END}", "lin_"),
    _shape("pulumi-token", rf"\bpul-[a-f0-9]{{40}}{_END}", "pul-"),
    _shape("databricks-token", rf"\bdapi[a-f0-9]{{32}}(?:-\d)?{_END}", "dapi"),
    _shape("heroku-key", rf"\bHRKU-[\w-]{{30,}}{_END}", "hrku-"),
    _shape("sentry-token", rf"\bsntry[su]?_[A-Za-z0-9+/=_-]{{30,}}{_END}", "sntr"),
    _shape("figma-token", rf"\bfig[dhu]_[\w-]{{30,}}{_END}", "figd_", "figh_", "figu_"),
    _shape("atlassian-token", rf"\bATATT3[\w=-]{{50,}}{_END}", "atatt3"),
    _shape("azure-ad-secret", r"(?<![\w~.-])[\w~.]{3}\dQ~[\w~.-]{31,34}(?![\w~.-])", "q~"),
    _shape("azure-storage-key", r"(?<=AccountKey=)[A-Za-z0-9+/=]{40,}", "accountkey="),
    _shape("jwt", rf"\beyJ[\w-]{{8,}}\.eyJ[\w-]{{8,}}\.[\w-]{{8,}}{_END}", "eyj"),
    _shape("telegram-bot-token", rf"\b\d{{8,10}}:AA[\w-]{{33}}{_END}", ":aa"),
    _shape("twilio-key", r"SK[0-9a-f]{32}(?![0-9A-Za-z])"),
    _shape("twilio-key", r"AC[0-9a-f]{32}(?![0-9A-Za-z])"),
    _shape("discord-bot-token", r"[MNO][\w-]{23,25}\.[\w-]{6}\.[\w-]{27,38}(?![\w-])"),
    _shape("mailchimp-key", r"\b[0-9a-f]{32}-us\d{1,2}\b", "-us"),
    _shape("square-token", rf"\b(?:sq0atp|sq0csp|EAAA)[\w-]{{22,}}{_END}", "sq0", "eaaa"),
    _shape("age-secret-key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b", "age-secret-key-1"),
    _shape("alibaba-access-key", r"\bLTAI[A-Za-z0-9]{12,20}\b", "ltai"),
    _shape("artifactory-key", rf"\bAKCp[A-Za-z0-9]{{60,}}{_END}", "akcp"),
    _shape("clojars-token", rf"\bCLOJARS_[a-z0-9]{{60}}{_END}", "clojars_"),
    _shape("dynatrace-token", rf"\bdt0c01\.[A-Z0-9]{{24}}\.[A-Z0-9]{{64}}{_END}", "dt0c01."),
    _shape("flyio-token", rf"\bFlyV1 fm\d_[\w+/=,-]{{30,}}{_END}", "flyv1"),
    _shape("planetscale-token", rf"\bpscale_(?:tkn|pw|oauth)_[\w.=-]{{32,}}{_END}", "pscale_"),
    _shape("rubygems-key", rf"\brubygems_[a-f0-9]{{48}}{_END}", "rubygems_"),
    _shape("nuget-key", rf"\boy2[a-z0-9]{{43}}{_END}", "oy2"),
    _shape("terraform-token", rf"\b[A-Za-z0-9]{{14}}\.atlasv1\.[\w=-]{{60,}}{_END}", "atlasv1"),
    _shape("buildkite-token", rf"\bbk(?:ua)?_[a-f0-9]{{40}}{_END}", "bk_", "bkua_"),
    _shape("circleci-token", rf"\bCCIPAT_[\w]{{20,}}{_END}", "ccipat_"),
    _shape("easypost-key", rf"\bEZ[AT]K[a-zA-Z0-9]{{54}}{_END}", "ezak", "eztk"),
    _shape("mapbox-token", rf"\b[ps]k\.eyJ[\w-]{{20,}}\.[\w-]{{20,}}{_END}", "k.eyj"),
    # A token a test runner shortened for display (pytest: 'ghp_a1B2...2a1B2'): both ends are
    # the secret's, and together they leave little of it to guess.
    _shape("truncated-token", rf"\b{TRUNCATED_PREFIXES}[\w-]{{4,}}(?:\.\.\.|\u2026)[\w-]*", *TRUNCATED_KEYWORDS),
]
# fmt: on

DETECTORS = [*NAMED, *ARGUMENTS, *KEYS_AND_HEADERS, *URLS, *TOKEN_SHAPES]
