"""What every page of the console needs, built once per app (``app.create_app``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from theow_workers.config import Settings
from theow_workers.core.logs.summary import LinePredicate
from theow_workers.store import console as queries
from theow_workers.store.explore import ExploreStore
from theow_workers.store.reads import SqlReads
from theow_workers.store.run_reads import SqlRunReads
from theow_workers.store.runs import configured_branches
from theow_workers.store.testcases import SqlTestcases
from theow_workers.web.affected import AffectedCounter
from theow_workers.web.auth import Keys, Session, Sessions
from theow_workers.web.groups import BasisCache
from theow_workers.web.hosts import AllowedHosts
from theow_workers.web.insight import insight_data
from theow_workers.web.library import LibraryView
from theow_workers.web.snapshot import Snapshot
from theow_workers.web.throttle import TOKEN_FREE_FAILURES, LoginThrottle

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

HERE = Path(__file__).resolve().parent
FLASH = "theow_flash"


def templates() -> Jinja2Templates:
    found = Jinja2Templates(directory=str(HERE / "templates"))
    found.env.autoescape = True  # every value escaped, whatever the template's name
    return found


class Console:
    """What every page needs: settings, the store, the keys, templates, the counter."""

    def __init__(self, settings: Settings, store: ExploreStore, bound: str = "") -> None:
        self.settings = settings
        self.store = store
        self.reads = SqlReads(store)  # what the pages and the JSON API read (views.ports.Reads)
        # The ledger's recent runs, which the incidents are derived from (views.incidents).
        self.runs = SqlRunReads(store.sql.engine, configured_branches(settings.default_branches))
        self.tests = SqlTestcases(store.sql.engine)  # each test's outcomes (views.tests)
        self.keys = Keys.for_deployment(
            settings.web_password.get_secret_value(),
            settings.web_readonly_password.get_secret_value(),
            settings.home,
        )
        self.sessions = Sessions()
        self.throttle = LoginThrottle()
        self.token_throttle = LoginThrottle(free_failures=TOKEN_FREE_FAILURES)  # API and intake
        self.hosts = AllowedHosts.of(settings.web_allowed_hosts, bound)
        self.templates = templates()
        self.affected = AffectedCounter(store)
        self._library = LibraryView(settings.rule_layers, settings.action_layers)
        bases = BasisCache(wrappers=self._wrappers)
        self.insight = Snapshot(lambda: insight_data(store, bases))
        self.activity = Snapshot(lambda: queries.rule_activity(store))
        self._runtime: Runtime | None = None
        self._runtime_lock = threading.Lock()

    def library(self) -> LibraryView:
        return self._library

    def _wrappers(self) -> tuple[str, LinePredicate | None]:
        """The rule library's wrapper test and version (none when its rules do not load)."""
        try:
            book = self._library.knowledge().book
        except Exception:  # a broken rules directory: group without wrappers, never fail
            return "", None
        return book.version, book.is_wrapper

    def runtime(self) -> Runtime:
        """The console's services, for the index syncs after approvals: the model loads once."""
        with self._runtime_lock:
            if self._runtime is None:
                from theow_workers.runtime import build

                self._runtime = build(self.settings, "web")
            return self._runtime

    def render(self, request: Request, name: str, status: int = 200, **context: object) -> Response:
        session: Session = request.state.session
        flash = request.cookies.get(FLASH, "")
        response = self.templates.TemplateResponse(
            request,
            name,
            {"session": session, "csrf": self.keys.csrf_token(session), "flash": flash, **context},
            status_code=status,
        )
        if flash:
            response.delete_cookie(FLASH)
        return response
