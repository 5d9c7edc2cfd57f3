"""Who gets into the web console, and which POSTs it accepts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from theow_workers.config import Settings
from theow_workers.web.auth import (
    READER,
    REVIEWER,
    SESSION_SECONDS,
    Keys,
    Session,
    Sessions,
    WebAuthError,
    server_secret,
)
from theow_workers.web.render import code, log_lines
from theow_workers.web.server import web_command

SECRET = b"a deployment's server secret"
REVIEW_PW, READ_PW = "review-pw-long-enough", "read-pw-long-enough"


def test_the_console_refuses_to_start_without_a_password():
    with pytest.raises(WebAuthError, match="THEOW_WEB_PASSWORD"):
        web_command(Settings.load(env={}))


def test_theow_web_without_a_password_exits_2_with_the_reason(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
    env["THEOW_HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-m", "theow_workers.cli", "web"], env=env,
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert "never started without authentication" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_read_only_password_must_differ_from_the_reviewers():
    with pytest.raises(WebAuthError, match="must differ"):
        Keys.from_passwords(REVIEW_PW, REVIEW_PW, SECRET)


def test_each_password_logs_in_its_own_role_and_others_nothing():
    keys = Keys.from_passwords(REVIEW_PW, READ_PW, SECRET)
    assert keys.role_for(REVIEW_PW) == REVIEWER
    assert keys.role_for(READ_PW) == READER
    assert keys.role_for("") is None and keys.role_for(REVIEW_PW + " ") is None
    assert (
        Keys.from_passwords(REVIEW_PW, "", SECRET).role_for("") is None
    )  # no reader password: no reader


def test_a_session_cookie_cannot_be_forged_altered_or_used_after_it_expires_or_closes():
    sessions = Sessions()
    cookie = sessions.open(READER, "eve")
    assert sessions.get(cookie).role == READER
    assert sessions.get(cookie[:-1]) is None and sessions.get(cookie + "x") is None
    assert Sessions().get(cookie) is None  # another console process (or a restart)
    later = sessions.open(REVIEWER, "ada", now=1000.0)
    assert sessions.get(later, now=1000.0 + SESSION_SECONDS - 1) is not None
    assert sessions.get(later, now=1000.0 + SESSION_SECONDS + 1) is None
    sessions.close(cookie)
    assert sessions.get(cookie) is None


def test_a_csrf_token_belongs_to_one_session():
    keys = Keys.from_passwords(REVIEW_PW, "", SECRET)
    sessions = Sessions()
    mine = sessions.get(sessions.open(REVIEWER, "ada"))
    theirs = sessions.get(sessions.open(REVIEWER, "ada"))
    assert mine is not None and theirs is not None
    assert keys.csrf_ok(mine, keys.csrf_token(mine))
    assert not keys.csrf_ok(mine, keys.csrf_token(theirs))
    assert not keys.csrf_ok(mine, "") and not keys.csrf_ok(mine, None)


def test_logs_and_diffs_are_escaped_and_their_secrets_masked():
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    html = str(code(f"+<script>alert(1)</script>\n+TOKEN={token}\n", "diff"))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert token not in html
    lines = log_lines(f"ok\n<img src=x onerror=alert(1)> {token}\n", {2: ["r"]})
    assert lines[1]["rules"] == ["r"] and token not in lines[1]["text"]


def test_each_deployment_signs_with_its_own_secret_kept_private_in_its_home(tmp_path):
    home = tmp_path / "home"
    secret = server_secret(home)
    assert len(secret) >= 16 and server_secret(home) == secret  # made once, then read
    assert (home / "web-secret").stat().st_mode & 0o777 == 0o600
    other = server_secret(tmp_path / "other")
    assert other != secret

    ours = Keys.for_deployment(REVIEW_PW, "", home)
    session = Session(REVIEWER, "ada", nonce="0123456789abcdef")
    # Same passwords, another deployment: a CSRF token does not carry over, nor can a
    # page's token be checked against guessed passwords without the secret.
    theirs = Keys.for_deployment(REVIEW_PW, "", tmp_path / "other")
    assert theirs.csrf_token(session) != ours.csrf_token(session)

    (home / "web-secret").write_text("not hex")
    with pytest.raises(WebAuthError, match="web-secret"):
        server_secret(home)
