"""A fake Gemini API on loopback, spoken to by the real google-genai client.

It serves ``POST /{api_version}/models/{model}:generateContent`` as Google
does, and checks what Gemini checks: the ``x-goog-api-key`` header, that every
model turn sent back carries the thought signature it was issued (a
function-call turn without one gets Gemini's 400), and that each function-call
turn is answered by as many function responses. Replies come from a script
per model, then from a ``brain``; errors come back with Google's JSON bodies.
It runs in a background thread, so Celery workers in other processes can reach
it through ``THEOW_GEMINI_BASE_URL``.

>>> with FakeGemini() as fake:  # doctest: +SKIP
...     fake.script("gemini-2.5-flash", [function_call("give_up", reason="no idea")])
...     gateway = GeminiGateway("gemini-2.5-flash", api_key="k", base_url=fake.url)
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import sys
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Response = dict[str, Any]
Brain = Callable[[str, dict[str, Any]], "Response | FakeError"]

_PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:]+):(?P<method>\w+)$")


class FakeError(Exception):
    """An error response: raise it from a brain, return it, or put it in a script."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body

    @property
    def reply(self) -> tuple[int, dict[str, Any]]:
        return self.status, self.body


# --- building replies -------------------------------------------------------


def _reply(*parts: dict[str, Any]) -> Response:
    return {
        "candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP"}]
    }


def function_call(name: str, /, **args: Any) -> Response:
    """A reply calling one tool: ``function_call("give_up", reason="...")``."""
    return _reply({"functionCall": {"name": name, "args": args}})


def text(t: str) -> Response:
    return _reply({"text": t})


def combine(*responses: Response) -> Response:
    """One reply holding the parts of several, e.g. parallel function calls."""
    return _reply(*(p for r in responses for p in r["candidates"][0]["content"]["parts"]))


def with_usage(response: Response, prompt: int, output: int, thoughts: int = 0) -> Response:
    """Set the usage the reply reports (by default it is about len(json)/4)."""
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + thoughts,
    }
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return {**response, "usageMetadata": usage}


def api_error(status: int, code: str, message: str, details: list[Any] | None = None) -> FakeError:
    error: dict[str, Any] = {"code": status, "message": message, "status": code}
    if details is not None:
        error["details"] = details
    return FakeError(status, {"error": error})


def quota_error(
    per_day: bool = False, retry_delay: str | None = "1s", model: str = "gemini-2.5-flash"
) -> FakeError:
    """Gemini's 429, with QuotaFailure (per-minute or per-day) and RetryInfo."""
    period = "PerDay" if per_day else "PerMinute"
    details: list[Any] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                    "quotaId": f"GenerateRequests{period}PerProjectPerModel-FreeTier",
                    "quotaDimensions": {"location": "global", "model": model},
                    "quotaValue": "250" if per_day else "10",
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [
                {
                    "description": "Learn more",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                }
            ],
        },
    ]
    if retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    message = (
        "You exceeded your current quota, please check your plan and billing details. "
        f"Please retry in {retry_delay}."
    )
    return api_error(429, "RESOURCE_EXHAUSTED", message, details)


def server_error(message: str = "Internal error encountered.") -> FakeError:
    return api_error(500, "INTERNAL", message)


# --- reading requests -------------------------------------------------------


def declared(body: dict[str, Any]) -> list[str]:
    """Names of the function declarations a request offered."""
    return [
        d["name"] for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])
    ]


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every text part of the user turns of a request, in order."""
    return [
        part["text"]
        for content in body.get("contents", [])
        if content.get("role", "user") == "user"
        for part in content.get("parts", [])
        if "text" in part
    ]


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part["functionResponse"]
        for content in body.get("contents", [])
        for part in content.get("parts", [])
        if "functionResponse" in part
    ]


def _part_key(part: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in part.items() if k != "thoughtSignature"}, sort_keys=True)


# --- the server -------------------------------------------------------------


class FakeGemini:
    """The fake API. ``brain(model, request)`` answers what no script does."""

    wire = sys.modules[__name__]  # the helpers a brain uses to read and answer

    def __init__(self, brain: Brain | None = None, *, api_key: str | None = None) -> None:
        self.brain = brain
        self.api_key = api_key  # when set, any other key is refused as Gemini does
        # Models `GET /v1beta/models/NAME` knows (an explorer checks its model at start).
        self.models = {"gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite"}
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Any]] = defaultdict(deque)
        self._requests: list[tuple[str, dict[str, Any]]] = []
        self._usage: list[tuple[str, int, int]] = []
        self._signatures: dict[str, set[str]] = defaultdict(set)
        self._ids = itertools.count(1)
        self.rejections: list[tuple[str, str]] = []  # (model, why) of every 4xx it made up
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeGemini:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.05,), daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeGemini:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # behaviour and observations
    def forget(self) -> None:
        """No brain, script or record left: the next test on a long-running server starts clean."""
        with self._lock:
            self.brain = None
            self._scripts.clear()
            self._requests.clear()
            self._usage.clear()
            self.rejections.clear()

    def script(self, model: str, steps: list[Any]) -> None:
        """Replies for ``model``, consumed in order: dicts, FakeErrors or brains."""
        with self._lock:
            self._scripts[model].extend(steps)

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return list(self._requests)

    def bodies(self, model: str | None = None) -> list[dict[str, Any]]:
        return [body for m, body in self.requests if model in (None, m)]

    def sessions(self, model: str | None = None) -> int:
        """Requests opening a session: their contents hold exactly one user turn."""
        return sum(
            1
            for body in self.bodies(model)
            if [c.get("role", "user") for c in body.get("contents", [])] == ["user"]
        )

    def tokens_in(self, model: str | None = None) -> int:
        with self._lock:
            return sum(n for m, n, _ in self._usage if model in (None, m))

    def tokens_out(self, model: str | None = None) -> int:
        with self._lock:
            return sum(n for m, _, n in self._usage if model in (None, m))

    # serving
    def handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any]]:
        found = _PATH.match(path.split("?", 1)[0])
        if not found or found["method"] != "generateContent":
            return self._refuse("", 404, "NOT_FOUND", f"fake: no route for {path}").reply
        model = found["model"]
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._refuse(model, 400, "INVALID_ARGUMENT", "Invalid JSON payload").reply
        with self._lock:
            self._requests.append((model, body))
        key = headers.get("x-goog-api-key")
        if not key:
            message = "Method doesn't allow unregistered callers"
            return self._refuse(model, 403, "PERMISSION_DENIED", message).reply
        if self.api_key is not None and key != self.api_key:
            message = "API key not valid. Please pass a valid API key."
            return self._refuse(model, 400, "INVALID_ARGUMENT", message).reply
        with self._lock:
            problem = self._check_history(body.get("contents", []))
        if problem:
            return self._refuse(model, 400, "INVALID_ARGUMENT", problem).reply
        try:
            reply = self._answer(model, body)
        except FakeError as exc:
            reply = exc
        except Exception as exc:  # a broken brain: say so as a 500
            reply = self._refuse(model, 500, "INTERNAL", f"fake brain failed: {exc!r}")
        if isinstance(reply, FakeError):
            return reply.reply
        return 200, self._issue(model, body, reply)

    def _refuse(self, model: str, status: int, code: str, message: str) -> FakeError:
        with self._lock:
            self.rejections.append((model, message))
        return api_error(status, code, message)

    def _answer(self, model: str, body: dict[str, Any]) -> Response | FakeError:
        with self._lock:
            queue = self._scripts.get(model)
            step = queue.popleft() if queue else self.brain
        if step is None:
            return self._refuse(
                model, 400, "INVALID_ARGUMENT", f"fake: nothing scripted for {model}"
            )
        if callable(step):
            return step(model, body)
        return step  # type: ignore[no-any-return]

    def _check_history(self, contents: list[dict[str, Any]]) -> str:
        """Gemini's checks of a history; an empty string when it passes."""
        calls: list[dict[str, Any]] = []
        for position, content in enumerate(contents, start=1):
            parts = content.get("parts", [])
            if content.get("role") == "model":
                for index, part in enumerate(parts):
                    signature = part.get("thoughtSignature")
                    issued = self._signatures.get(_part_key(part), set())
                    first_call = index == 0 and "functionCall" in part
                    if (issued and signature not in issued) or (first_call and not signature):
                        name = part.get("functionCall", {}).get("name", "")
                        what = f"function call `default_api:{name}`" if name else "part"
                        return (
                            "Function call is missing a thought_signature in functionCall parts. "
                            "This is required for tools to work correctly, and missing "
                            "thought_signature may lead to degraded model performance. "
                            f"Additional data, {what} , position {position}."
                        )
                calls = [p["functionCall"] for p in parts if "functionCall" in p]
                continue
            answers = [p["functionResponse"] for p in parts if "functionResponse" in p]
            if calls or answers:
                names = sorted(c["name"] for c in calls)
                if len(answers) != len(calls) or sorted(a.get("name") for a in answers) != names:
                    return (
                        "Please ensure that the number of function response parts is equal to "
                        "the number of function call parts of the function call turn."
                    )
                ids = {c.get("id") for c in calls}
                if any(a.get("id") not in ids for a in answers):
                    return (
                        f"fake: function response ids do not match the calls at position {position}"
                    )
            calls = []
        return ""

    def _issue(self, model: str, body: dict[str, Any], reply: Response) -> Response:
        """Give the reply ids, a thought signature and usage, and remember the signature."""
        reply = json.loads(json.dumps(reply))
        with self._lock:
            candidates = reply.get("candidates")
            for candidate in candidates if isinstance(candidates, list) else []:
                content = candidate.get("content") if isinstance(candidate, dict) else None
                parts = content.get("parts", []) if isinstance(content, dict) else []
                for part in parts:
                    if "functionCall" in part:
                        part["functionCall"].setdefault("id", f"call_{next(self._ids)}")
                if parts and "thoughtSignature" not in parts[0]:
                    signature = base64.b64encode(f"sig-{next(self._ids)}".encode()).decode()
                    parts[0]["thoughtSignature"] = signature
                    self._signatures[_part_key(parts[0])].add(signature)
            if "usageMetadata" not in reply:
                prompt = len(json.dumps(body)) // 4 + 1
                output = len(json.dumps(reply.get("candidates", []))) // 4 + 1
                reply["usageMetadata"] = {
                    "promptTokenCount": prompt,
                    "candidatesTokenCount": output,
                    "totalTokenCount": prompt + output,
                }
            usage = reply["usageMetadata"]
            self._usage.append(
                (
                    model,
                    int(usage.get("promptTokenCount", 0)),
                    int(usage.get("candidatesTokenCount", 0))
                    + int(usage.get("thoughtsTokenCount", 0)),
                )
            )
        reply.setdefault("modelVersion", model)
        return reply


_MODEL_PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:?]+)$")


def _model_info(fake: FakeGemini, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """``GET /v1beta/models/NAME``: the model's metadata, as Gemini answers it."""
    found = _MODEL_PATH.match(path.split("?", 1)[0])
    key = headers.get("x-goog-api-key")
    if not found:
        return fake._refuse("", 404, "NOT_FOUND", f"fake: no route for {path}").reply
    model = found["model"]
    if not key or (fake.api_key is not None and key != fake.api_key):
        return fake._refuse(model, 400, "INVALID_ARGUMENT", "API key not valid.").reply
    if model not in fake.models:
        return fake._refuse(model, 404, "NOT_FOUND", f"models/{model} is not found").reply
    return 200, {"name": f"models/{model}", "supportedGenerationMethods": ["generateContent"]}


def _handler(fake: FakeGemini) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._reply(*_model_info(fake, self.path, headers))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                status, body = fake.handle(self.path, headers, raw)
            except Exception as exc:  # a bug of the fake: a 500 the test will see
                status, body = fake._refuse("", 500, "INTERNAL", f"fake failed: {exc!r}").reply
            self._reply(status, body)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
