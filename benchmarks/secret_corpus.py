"""Fake secrets in the contexts build logs leak them in: 100+ formats for benchmarks/masking.py.

Every format is a function of a random generator returning ``(line, secrets)``:
a log line holding the secret as a build would print it, and the values that
must not survive masking. Values are random in each provider's published shape
(prefix, length, alphabet), so no two runs test the same strings.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable

Format = Callable[[random.Random], tuple[str, list[str]]]

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
# What a password may hold where it is written bare (no quote, no separator).
PASSWORD_CHARS = ALNUM + "!#%^*_+=-.~@"


def rnd(r: random.Random, alphabet: str, n: int) -> str:
    return "".join(r.choice(alphabet) for _ in range(n))


def password(r: random.Random, alphabet: str = PASSWORD_CHARS) -> str:
    # Always a letter and a digit: a real password policy, and never a bare number.
    return (
        r.choice(string.ascii_letters) + rnd(r, alphabet, r.randint(6, 18)) + r.choice("0123456789")
    )


def words(r: random.Random) -> str:
    pool = ["hunter", "correct", "horse", "battery", "staple", "blue", "monkey", "river"]
    return " ".join(r.sample(pool, 2)) + str(r.randint(1, 99))


def token(prefix: str, alphabet: str, n: int, suffix: str = "") -> Callable[[random.Random], str]:
    return lambda r: prefix + rnd(r, alphabet, n) + suffix


# Token shapes, each printed the way a build would: in an env dump, a command, a config line.
SHAPES: dict[str, Callable[[random.Random], str]] = {
    "github-pat-classic": token("ghp_", ALNUM, 36),
    "github-oauth": token("gho_", ALNUM, 36),
    "github-user-to-server": token("ghu_", ALNUM, 36),
    "github-server-to-server": token("ghs_", ALNUM, 36),
    "github-refresh": token("ghr_", ALNUM, 36),
    "github-fine-grained-pat": lambda r: f"github_pat_{rnd(r, ALNUM, 22)}_{rnd(r, ALNUM, 59)}",
    "gitlab-pat": token("glpat-", URLSAFE, 20),
    "gitlab-deploy-token": token("gldt-", URLSAFE, 20),
    "gitlab-runner-token": token("glrt-", URLSAFE, 20),
    "gitlab-pipeline-trigger": token("glptt-", HEX, 40),
    "npm-token": token("npm_", ALNUM, 36),
    "aws-access-key-id": token("AKIA", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
    "aws-session-key-id": token("ASIA", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
    "slack-bot-token": lambda r: (
        f"xoxb-{rnd(r, '0123456789', 12)}-{rnd(r, '0123456789', 13)}-{rnd(r, ALNUM, 24)}"
    ),
    "slack-user-token": lambda r: (
        f"xoxp-{rnd(r, '0123456789', 12)}-{rnd(r, '0123456789', 12)}-{rnd(r, '0123456789', 13)}-{rnd(r, HEX, 32)}"
    ),
    "slack-app-token": lambda r: (
        f"xapp-1-{rnd(r, UPPER_ALNUM, 11)}-{rnd(r, '0123456789', 13)}-{rnd(r, HEX, 64)}"
    ),
    "google-api-key": token("AIza", URLSAFE, 35),
    "google-oauth-access-token": token("ya29.", URLSAFE, 120),
    "openai-project-key": lambda r: f"sk-proj-{rnd(r, URLSAFE, 74)}T3BlbkFJ{rnd(r, URLSAFE, 74)}",
    "openai-legacy-key": lambda r: f"sk-{rnd(r, ALNUM, 20)}T3BlbkFJ{rnd(r, ALNUM, 20)}",
    "anthropic-key": lambda r: f"sk-ant-api03-{rnd(r, URLSAFE, 93)}AA",
    "stripe-secret-live": token("sk_live_", ALNUM, 24),
    "stripe-restricted-live": token("rk_live_", ALNUM, 24),
    "stripe-secret-test": token("sk_test_", ALNUM, 24),
    "stripe-webhook-secret": token("whsec_", ALNUM, 32),
    "sendgrid-key": lambda r: f"SG.{rnd(r, URLSAFE, 22)}.{rnd(r, URLSAFE, 43)}",
    "pypi-token": token("pypi-AgEIcHlwaS5vcmc", URLSAFE, 80),
    "huggingface-token": token("hf_", ALNUM, 34),
    "digitalocean-pat": token("dop_v1_", HEX, 64),
    "shopify-access-token": token("shpat_", HEX, 32),
    "docker-hub-pat": token("dckr_pat_", URLSAFE, 27),
    "vault-service-token": token("hvs.", URLSAFE, 90),
    "doppler-token": token("dp.pt.", ALNUM, 43),
    "postman-key": lambda r: f"PMAK-{rnd(r, HEX, 24)}-{rnd(r, HEX, 34)}",
    "grafana-cloud-token": token("glc_", ALNUM, 56),
    "grafana-service-account": lambda r: f"glsa_{rnd(r, ALNUM, 32)}_{rnd(r, HEX, 8)}",
    "newrelic-user-key": token("NRAK-", UPPER_ALNUM, 27),
    "linear-api-key": token("lin_api_", ALNUM, 40),
    "pulumi-token": token("pul-", HEX, 40),
    "databricks-token": token("dapi", HEX, 32),
    "heroku-key": token("HRKU-", URLSAFE, 60),
    "sentry-user-token": token("sntryu_", HEX, 64),
    "figma-token": token("figd_", URLSAFE, 40),
    "atlassian-api-token": token("ATATT3", URLSAFE + "=", 186),
    "azure-ad-client-secret": lambda r: f"{rnd(r, ALNUM, 3)}8Q~{rnd(r, URLSAFE + '.~', 34)}",
    "jwt": lambda r: (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        + base64.urlsafe_b64encode(
            f'{{"sub":"{rnd(r, ALNUM, 12)}","iat":{r.randint(10**9, 2 * 10**9)}}}'.encode()
        )
        .decode()
        .rstrip("=")
        + "."
        + rnd(r, URLSAFE, 43)
    ),
    "telegram-bot-token": lambda r: f"{r.randint(10**8, 10**9)}:AA{rnd(r, URLSAFE, 33)}",
    "twilio-api-key": token("SK", HEX, 32),
    "mailchimp-key": lambda r: f"{rnd(r, HEX, 32)}-us{r.randint(1, 20)}",
    "square-access-token": token("sq0atp-", URLSAFE, 22),
    "square-oauth-secret": token("sq0csp-", URLSAFE, 43),
    "age-secret-key": token("AGE-SECRET-KEY-1", "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
    "alibaba-access-key": token("LTAI", ALNUM, 20),
    "artifactory-api-key": token("AKCp", ALNUM, 69),
    "clojars-token": token("CLOJARS_", LOWER_ALNUM, 60),
    "dynatrace-token": lambda r: f"dt0c01.{rnd(r, UPPER_ALNUM, 24)}.{rnd(r, UPPER_ALNUM, 64)}",
    "planetscale-token": token("pscale_tkn_", URLSAFE, 43),
    "rubygems-key": token("rubygems_", HEX, 48),
    "nuget-key": token("oy2", LOWER_ALNUM, 43),
    "terraform-cloud-token": lambda r: f"{rnd(r, ALNUM, 14)}.atlasv1.{rnd(r, URLSAFE, 67)}",
    "buildkite-token": token("bkua_", HEX, 40),
    "circleci-token": token("CCIPAT_", ALNUM, 40),
    "easypost-key": token("EZAK", ALNUM, 54),
    "mapbox-secret-token": lambda r: f"sk.eyJ1Ijoi{rnd(r, ALNUM, 20)}.{rnd(r, URLSAFE, 22)}",
    "discord-bot-token": lambda r: (
        f"M{rnd(r, URLSAFE, 23)}.{rnd(r, URLSAFE, 6)}.{rnd(r, URLSAFE, 27)}"
    ),
}

# Where a token shows up in a log (a name that says nothing, so the shape alone must catch it).
SHAPE_CONTEXTS = [
    "+ echo {v}",
    "##[debug]Evaluating: format('{{0}}', '{v}')",
    "   using credential {v} for upload",
    "curl -s https://api.example.test/v1/things?key={v}",
]


def shape_format(maker: Callable[[random.Random], str]) -> Format:
    def make(r: random.Random) -> tuple[str, list[str]]:
        value = maker(r)
        return r.choice(SHAPE_CONTEXTS).format(v=value), [value]

    return make


def contextual(template: str, maker: Callable[[random.Random], str] = password) -> Format:
    def make(r: random.Random) -> tuple[str, list[str]]:
        value = maker(r)
        return template.format(v=value, user=rnd(r, string.ascii_lowercase, 6)), [value]

    return make


def private_key(kind: str, escaped: bool = False) -> Format:
    def make(r: random.Random) -> tuple[str, list[str]]:
        lines = [rnd(r, B64, 64) for _ in range(r.randint(4, 12))] + [rnd(r, B64, 20) + "=="]
        nl = "\\n" if escaped else "\n"
        block = f"-----BEGIN {kind}-----{nl}{nl.join(lines)}{nl}-----END {kind}-----"
        if escaped:
            return f'  "private_key": "{block}{nl}",', lines
        return block, lines

    return make


def basic_header(r: random.Random) -> tuple[str, list[str]]:
    secret = password(r)
    encoded = base64.b64encode(f"{rnd(r, string.ascii_lowercase, 6)}:{secret}".encode()).decode()
    return f"> Authorization: Basic {encoded}", [encoded]


def webhook(template: str, *parts: Callable[[random.Random], str]) -> Format:
    def make(r: random.Random) -> tuple[str, list[str]]:
        values = [part(r) for part in parts]
        return template.format(*values), values

    return make


def digits(n: int) -> Callable[[random.Random], str]:
    return lambda r: rnd(r, "0123456789", n)


CONTEXTS: dict[str, Format] = {
    "cli --password X": contextual("+ ./deploy.sh --user {user} --password {v} --region eu"),
    "cli --password=X": contextual(
        "+ liquibase update --password={v} --url jdbc:postgresql://db/app"
    ),
    "cli --db-password 'X'": contextual("+ app migrate --db-password '{v}'", words),
    "cli --token X": contextual("+ sonar-scanner --token {v}"),
    "cli --api-key=X": contextual("+ datadog-ci upload --api-key={v}"),
    "cli --client-secret X": contextual("+ az login --service-principal --client-secret {v}"),
    "mysql -pX": contextual("+ mysql -h db -u root -p{v} app < schema.sql"),
    "mysqldump -p'X'": contextual("+ mysqldump -u backup -p'{v}' --all-databases"),
    "docker login -p X": contextual("+ docker login -u {user} -p {v} registry.example.test"),
    "docker login --password X": contextual(
        "+ docker login --username {user} --password {v} ghcr.io"
    ),
    "helm registry login -p X": contextual(
        "+ helm registry login registry.example.test -u {user} -p {v}"
    ),
    "podman login --password=X": contextual("+ podman login --password={v} quay.io"),
    "sshpass -p X": contextual("+ sshpass -p {v} ssh deploy@10.0.0.5"),
    "curl -u user:X": contextual("+ curl -fsS -u {user}:{v} https://nexus.example.test/repository"),
    "PGPASSWORD='X'": contextual("+ PGPASSWORD='{v}' psql -h db -U app", words),
    'PGPASSWORD="X"': contextual('export PGPASSWORD="{v}"', words),
    "DB_PASS=X": contextual("DB_PASS={v}"),
    "DB_PASSWORD=X": contextual("  DB_PASSWORD={v}"),
    "MYSQL_ROOT_PASSWORD": contextual("+ docker run -e MYSQL_ROOT_PASSWORD={v} mysql:8"),
    "POSTGRES_PASSWORD yaml": contextual("      POSTGRES_PASSWORD: {v}"),
    "json password": contextual('{{"user": "{user}", "password": "{v}", "host": "db"}}'),
    "json escaped password": contextual(
        '"body": "{{\\"username\\": \\"{user}\\", \\"password\\": \\"{v}\\"}}"'
    ),
    "yaml password": contextual("  password: {v}"),
    "yaml quoted password": contextual("  password: '{v}'", words),
    "properties password": contextual("spring.datasource.password={v}"),
    "xml password": contextual("    <password>{v}</password>"),
    "python kwarg password": contextual("    conn = connect(host='db', password='{v}')"),
    "ruby hash password": contextual('  :password => "{v}",'),
    "TWINE_PASSWORD": contextual("TWINE_PASSWORD={v}", SHAPES["pypi-token"]),
    "passphrase": contextual("  gpg --batch --passphrase {v} --decrypt secrets.gpg"),
    "KEYSTORE_PASS": contextual("ANDROID_KEYSTORE_PASS={v}"),
    "url credentials https": contextual(
        "+ git clone https://{user}:{v}@git.example.test/team/app.git"
    ),
    "url credentials postgres": contextual("DATABASE_URL=postgresql://{user}:{v}@db:5432/app"),
    "url credentials redis": contextual("Connecting to redis://:{v}@cache:6379/0"),
    "url credentials amqp": contextual("broker: amqp://{user}:{v}@rabbit:5672//"),
    "url token as user": contextual(
        "+ git push https://{v}@github.com/org/repo.git", SHAPES["github-pat-classic"]
    ),
    "url x-access-token": contextual(
        "+ git fetch https://x-access-token:{v}@github.com/o/r", SHAPES["github-server-to-server"]
    ),
    "Authorization: Bearer": contextual("> Authorization: Bearer {v}", token("", URLSAFE, 40)),
    "Authorization: token": contextual("> Authorization: token {v}", token("", HEX, 40)),
    "Authorization: Basic": basic_header,
    "curl -H Authorization": contextual(
        "+ curl -H 'Authorization: Bearer {v}' https://api.example.test", token("", ALNUM, 32)
    ),
    "json authorization header": contextual(
        '{{"headers": {{"Authorization": "Bearer {v}"}}}}', token("", URLSAFE, 48)
    ),
    "PRIVATE-TOKEN header": contextual(
        "+ curl --header 'PRIVATE-TOKEN: {v}' https://gitlab.example.test/api/v4",
        SHAPES["gitlab-pat"],
    ),
    "X-Api-Key header": contextual("X-Api-Key: {v}", token("", HEX, 32)),
    "api_key=X": contextual("api_key={v}", token("", ALNUM, 32)),
    "query access_token": contextual("GET /v1/user?access_token={v}&page=2", token("", ALNUM, 40)),
    "azure sas sig": contextual(
        "https://acct.blob.core.windows.net/c/b.zip?sv=2022-11-02&sig={v}", token("", B64, 44)
    ),
    "client_secret=X": contextual("client_secret={v}", token("", URLSAFE, 40)),
    "SECRET_KEY=X": contextual("SECRET_KEY={v}", token("", ALNUM + "!@#%^*", 50)),
    "JWT_SECRET yaml": contextual("  JWT_SECRET: {v}", token("", HEX, 64)),
    "AWS_SECRET_ACCESS_KEY": contextual("AWS_SECRET_ACCESS_KEY={v}", token("", B64, 40)),
    "aws credentials file": contextual("aws_secret_access_key = {v}", token("", B64, 40)),
    "npmrc _authToken": contextual("//registry.npmjs.org/:_authToken={v}", SHAPES["npm-token"]),
    "NPM_TOKEN env": contextual("NPM_TOKEN={v}", token("", HEX, 36)),
    "GITHUB_TOKEN env": contextual("GITHUB_TOKEN={v}", SHAPES["github-server-to-server"]),
    "STRIPE_KEY env": contextual("STRIPE_KEY={v}", token("", ALNUM, 32)),
    "ENCRYPTION_KEY env": contextual("  ENCRYPTION_KEY={v}", token("", B64, 44)),
    "secret in json": contextual(
        '{{"client_id": "app", "client_secret": "{v}"}}', token("", URLSAFE, 40)
    ),
    "token in yaml": contextual("    token: {v}", token("", ALNUM, 40)),
    "softlayer api key": contextual("SOFTLAYER_API_KEY = {v}", token("", LOWER_ALNUM, 64)),
    "private key rsa": private_key("RSA PRIVATE KEY"),
    "private key openssh": private_key("OPENSSH PRIVATE KEY"),
    "private key ec": private_key("EC PRIVATE KEY"),
    "private key pkcs8": private_key("PRIVATE KEY"),
    "private key encrypted": private_key("ENCRYPTED PRIVATE KEY"),
    "private key pgp": private_key("PGP PRIVATE KEY BLOCK"),
    "private key in json": private_key("PRIVATE KEY", escaped=True),
    "slack webhook": webhook(
        "POST https://hooks.slack.com/services/T{}/B{}/{}",
        token("", UPPER_ALNUM, 10),
        token("", UPPER_ALNUM, 10),
        token("", ALNUM, 24),
    ),
    "slack workflow webhook": webhook(
        "SLACK_WEBHOOK_URL=https://hooks.slack.com/workflows/T{}/A{}/{}/{}",
        token("", UPPER_ALNUM, 10),
        token("", UPPER_ALNUM, 10),
        digits(18),
        token("", ALNUM, 24),
    ),
    "discord webhook": webhook(
        "notify: https://discord.com/api/webhooks/{}/{}", digits(18), token("", URLSAFE, 68)
    ),
    "discordapp webhook": webhook(
        "curl -X POST https://discordapp.com/api/webhooks/{}/{}", digits(18), token("", URLSAFE, 68)
    ),
    "teams webhook": webhook(
        "TEAMS_WEBHOOK=https://contoso.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}",
        token("", HEX, 32),
        token("", HEX, 32),
        token("", HEX, 32),
        token("", HEX, 32),
    ),
    "teams legacy webhook": webhook(
        "https://outlook.office.com/webhook/{}/IncomingWebhook/{}/{}",
        token("", HEX, 36),
        token("", HEX, 32),
        token("", HEX, 36),
    ),
    "power automate webhook": webhook(
        "https://prod-12.westeurope.logic.azure.com:443/workflows/{}/triggers/manual/paths/invoke?sig={}",
        token("", HEX, 32),
        token("", URLSAFE, 43),
    ),
    "google chat webhook": webhook(
        "https://chat.googleapis.com/v1/spaces/{}/messages?key={}&token={}",
        token("", URLSAFE, 11),
        token("AIza", URLSAFE, 35),
        token("", URLSAFE, 43),
    ),
}


def formats() -> dict[str, Format]:
    """Every format by name: the token shapes first, then the contexts."""
    return {**{f"shape {k}": shape_format(v) for k, v in SHAPES.items()}, **CONTEXTS}
