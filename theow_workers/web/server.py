"""Serving the console with uvicorn: ``theow web``, ``theow up`` and the compose ``web`` service.

>>> web_command(Settings.load(env={"THEOW_WEB_PASSWORD": "a-long-console-secret"})).url
'http://127.0.0.1:8808'
"""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from theow_workers.config import Settings
from theow_workers.web.auth import Keys


@dataclass(frozen=True)
class WebCommand:
    argv: list[str]
    url: str

    def start(self, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
        """The console as a child process of ``theow up``, dying with it."""
        from theow_workers.stack import die_with_parent

        return subprocess.Popen(
            self.argv,
            env=env,
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )


def web_command(settings: Settings, host: str = "127.0.0.1", port: int | None = None) -> WebCommand:
    """The command that serves the console; raises WebAuthError without a password or
    with a weak one (one line naming the variable)."""
    Keys.for_deployment(
        settings.web_password.get_secret_value(),
        settings.web_readonly_password.get_secret_value(),
        settings.home,
    )
    port = settings.web_port if port is None else port
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    argv = [sys.executable, "-m", "theow_workers.cli", "web", "--host", host, "--port", str(port)]
    return WebCommand(argv, f"http://{shown}:{port}")


def serve(settings: Settings, sock: socket.socket) -> None:
    """Run the console on ``sock`` (from ``stack.bind``) in this process until interrupted.

    The socket is bound before the URL is printed: a port in use is an error
    line, never a URL followed by uvicorn's failure to bind.
    """
    import uvicorn

    from theow_workers.store import migrate
    from theow_workers.web.app import create_app

    host, port = sock.getsockname()[:2]
    app = create_app(settings, bound=host)  # refuses before migrating without a good password
    migrate(settings.store_url)
    # uvicorn's own proxy_headers believes X-Forwarded-For from 127.0.0.1 (anyone on this
    # machine): off; the app believes THEOW_WEB_TRUSTED_PROXIES only (web/proxies.py).
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", proxy_headers=False, server_header=False
    )
    uvicorn.Server(config).run(sockets=[sock])
