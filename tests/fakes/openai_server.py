"""A fake OpenAI-compatible chat-completions API on loopback, spoken to by the real openai client.

It serves ``POST /v1/chat/completions`` and ``GET /v1/models`` as vLLM, Ollama
and OpenAI do, and checks what they check: the bearer key (when the fake has
one), and that every assistant turn with ``tool_calls`` is followed by one
``role: tool`` message per call, naming a ``tool_call_id`` the fake issued.
Replies come from a script per model, then from a ``brain``; errors come back
with OpenAI's JSON bodies (a 429 with its ``Retry-After`` header). A step may
also be :class:`Malformed` (a 200 whose body is not an answer) or
:class:`Slow` (an answer after a delay, to time a client out).

The helpers have the names and meaning of ``gemini_server``'s (``function_call``,
``text``, ``combine``, ``quota_error``, ``user_texts``, ``function_responses``,
``declared``), so a brain written against ``fake.wire`` plays either provider.

>>> with FakeOpenAI() as fake:  # doctest: +SKIP
...     fake.script("local-model", [function_call("give_up", reason="no idea")])
...     gateway = OpenAIChatGateway("local-model", fake.url)
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Response = dict[str, Any]
Brain = Callable[[str, dict[str, Any]], "Response | FakeError"]
MODEL = "local-model"


class FakeError(Exception):
    """An error response: raise it from a brain, return it, or put it in a script."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


@dataclass(frozen=True)
class Malformed:
    """A 200 whose body is ``raw``: not JSON, or JSON that is not a chat completion."""

    raw: bytes = b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0}]}'


@dataclass(frozen=True)
class Slow:
    """``then`` (a reply) after ``seconds``: longer than a client's timeout, it never arrives."""

    seconds: float
    then: Response = field(default_factory=lambda: text("too late"))


# --- building replies -------------------------------------------------------


def _reply(message: dict[str, Any], finish: str = "stop") -> Response:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return {"object": "chat.completion", "choices": [choice]}


def function_call(name: str, /, **args: Any) -> Response:
    """A reply calling one tool: ``function_call("give_up", reason="...")``."""
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return _reply({"content": None, "tool_calls": [call]}, finish="tool_calls")


def text(t: str) -> Response:
    return _reply({"content": t})


def combine(*responses: Response) -> Response:
    """One reply holding the text and tool calls of several, e.g. parallel calls."""
    messages = [r["choices"][0]["message"] for r in responses]
    content = "".join(m.get("content") or "" for m in messages) or None
    calls = [c for m in messages for c in m.get("tool_calls") or []]
    return _reply({"content": content, **({"tool_calls": calls} if calls else {})})


def with_usage(response: Response, prompt: int, output: int) -> Response:
    """Set the usage the reply reports (by default it is about len(json)/4)."""
    usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
    return {**response, "usage": usage}


def api_error(
    status: int, message: str, kind: str, code: str | None = None, **headers: str
) -> FakeError:
    error = {"message": message, "type": kind, "param": None, "code": code}
    return FakeError(status, {"error": error}, {k.replace("_", "-"): v for k, v in headers.items()})


def quota_error(
    per_day: bool = False, retry_delay: str | None = "1s", model: str = MODEL
) -> FakeError:
    """OpenAI's 429 for a per-minute or per-day limit, ``Retry-After`` from ``retry_delay``."""
    period = "requests per day (RPD)" if per_day else "requests per min (RPM)"
    message = (
        f"Rate limit reached for {model} in organization org-fake on {period}:"
        " Limit 10, Used 10, Requested 1. Please try again later."
    )
    headers = {"Retry-After": retry_delay.rstrip("s")} if retry_delay is not None else {}
    return api_error(429, message, "requests", "rate_limit_exceeded", **headers)


def server_error(
    message: str = "The server had an error while processing your request.",
) -> FakeError:
    return api_error(500, message, "server_error")


# --- reading requests -------------------------------------------------------


def declared(body: dict[str, Any]) -> list[str]:
    """Names of the tools a request offered."""
    return [t["function"]["name"] for t in body.get("tools", [])]


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every user message's text, in order."""
    return [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool answer as ``{"name", "id", "response"}``, named after the call it answers."""
    names = {
        c["id"]: c["function"]["name"]
        for m in body.get("messages", [])
        for c in m.get("tool_calls") or []
    }
    return [
        {"name": names.get(m["tool_call_id"]), "id": m["tool_call_id"], "response": _loads(m)}
        for m in body.get("messages", [])
        if m.get("role") == "tool"
    ]


def _loads(message: dict[str, Any]) -> Any:
    try:
        return json.loads(message.get("content") or "")
    except ValueError:
        return message.get("content")


# --- the server -------------------------------------------------------------


class FakeOpenAI:
    """The fake API. ``brain(model, request)`` answers what no script does."""

    wire = sys.modules[__name__]  # the helpers a brain uses to read and answer

    def __init__(self, brain: Brain | None = None, *, api_key: str | None = None) -> None:
        self.brain = brain
        self.api_key = api_key  # when set, any other bearer key is refused with a 401
        self.models = {MODEL, "strong-model"}  # what GET /v1/models lists
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Any]] = defaultdict(deque)
        self._requests: list[tuple[str, dict[str, Any]]] = []
        self._usage: list[tuple[str, int, int]] = []
        self._issued: set[str] = set()
        self._ids = itertools.count(1)
        self.rejections: list[tuple[str, str]] = []  # (model, why) of every 4xx it made up
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # lifecycle
    @property
    def url(self) -> str:
        """The base URL a client is given (the API's root, as vLLM's ``.../v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
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

    def __enter__(self) -> FakeOpenAI:
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
        """Replies for ``model``, consumed in order: dicts, FakeErrors, Malformed, Slow or brains."""
        with self._lock:
            self._scripts[model].extend(steps)

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return list(self._requests)

    def bodies(self, model: str | None = None) -> list[dict[str, Any]]:
        return [body for m, body in self.requests if model in (None, m)]

    def sessions(self, model: str | None = None) -> int:
        """Requests opening a session: their messages are one user message (and a system one)."""
        return sum(
            1
            for body in self.bodies(model)
            if [m.get("role") for m in body.get("messages", []) if m.get("role") != "system"]
            == ["user"]
        )

    def tokens_in(self, model: str | None = None) -> int:
        with self._lock:
            return sum(n for m, n, _ in self._usage if model in (None, m))

    def tokens_out(self, model: str | None = None) -> int:
        with self._lock:
            return sum(n for m, _, n in self._usage if model in (None, m))

    # serving
    def handle(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> FakeError | Malformed | Slow | Response:
        if path.split("?", 1)[0] != "/v1/chat/completions":
            return self._refuse("", 404, f"fake: no route for {path}", "invalid_request_error")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._refuse(
                "", 400, "We could not parse the JSON body", "invalid_request_error"
            )
        model = str(body.get("model", ""))
        with self._lock:
            self._requests.append((model, body))
        refused = self._auth(model, headers)
        if refused is not None:
            return refused
        with self._lock:
            problem = self._check_history(body.get("messages", []))
        if problem:
            return self._refuse(model, 400, problem, "invalid_request_error")
        try:
            reply = self._answer(model, body)
        except FakeError as exc:
            reply = exc
        except Exception as exc:  # a broken brain: say so as a 500
            reply = self._refuse(model, 500, f"fake brain failed: {exc!r}", "server_error")
        if isinstance(reply, FakeError | Malformed):
            return reply
        if isinstance(reply, Slow):
            return Slow(reply.seconds, self._issue(model, body, reply.then))
        return self._issue(model, body, reply)

    def models_list(self, headers: dict[str, str]) -> FakeError | Response:
        refused = self._auth("", headers)
        if refused is not None:
            return refused
        data = [{"id": m, "object": "model", "owned_by": "fake"} for m in sorted(self.models)]
        return {"object": "list", "data": data}

    def _auth(self, model: str, headers: dict[str, str]) -> FakeError | None:
        key = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if self.api_key is not None and key != self.api_key:
            message = "Incorrect API key provided. You can find your API key at the dashboard."
            return self._refuse(model, 401, message, "invalid_request_error", "invalid_api_key")
        return None

    def _refuse(
        self, model: str, status: int, message: str, kind: str, code: str | None = None
    ) -> FakeError:
        with self._lock:
            self.rejections.append((model, message))
        return api_error(status, message, kind, code)

    def _answer(self, model: str, body: dict[str, Any]) -> Any:
        with self._lock:
            queue = self._scripts.get(model)
            step = queue.popleft() if queue else self.brain
        if step is None:
            return self._refuse(
                model, 400, f"fake: nothing scripted for {model}", "invalid_request_error"
            )
        if callable(step):
            return step(model, body)
        return step

    def _check_history(self, messages: list[dict[str, Any]]) -> str:
        """OpenAI's checks of a history; an empty string when it passes."""
        waiting: list[str] = []  # tool_call ids the next messages must answer
        for position, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                if message.get("tool_call_id") not in waiting:
                    return (
                        "Invalid parameter: messages with role 'tool' must be a response to a"
                        f" preceeding message with 'tool_calls' (messages.[{position}])."
                    )
                waiting.remove(message["tool_call_id"])
                continue
            if waiting:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages"
                    " responding to each 'tool_call_id'. The following tool_call_ids did not"
                    f" have response messages: {', '.join(waiting)}"
                )
            if role == "assistant":
                calls = message.get("tool_calls") or []
                unknown = [c.get("id") for c in calls if c.get("id") not in self._issued]
                if unknown:
                    return (
                        f"fake: tool_call ids {unknown} were never issued (messages.[{position}])"
                    )
                for call in calls:
                    json.loads(call["function"]["arguments"])  # a 500 if not JSON: a client bug
                waiting = [c["id"] for c in calls]
        if waiting:
            return f"fake: tool_call_ids {', '.join(waiting)} were not answered"
        return ""

    def _issue(self, model: str, body: dict[str, Any], reply: Response) -> Response:
        """Give the reply's tool calls ids and the reply usage, and remember the ids."""
        reply = json.loads(json.dumps(reply))
        with self._lock:
            for choice in reply.get("choices") or []:
                for call in (choice.get("message") or {}).get("tool_calls") or []:
                    call.setdefault("id", f"call_{next(self._ids)}")
                    self._issued.add(call["id"])
            if "usage" not in reply:
                prompt = len(json.dumps(body)) // 4 + 1
                output = len(json.dumps(reply.get("choices", []))) // 4 + 1
                reply["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": output,
                    "total_tokens": prompt + output,
                }
            usage = reply["usage"] or {}  # None: a server that reports no usage
            self._usage.append(
                (model, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
            )
        reply.setdefault("id", f"chatcmpl-{next(self._ids)}")
        reply.setdefault("model", model)
        reply.setdefault("created", int(time.time()))
        return reply


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path.split("?", 1)[0] == "/v1/models":
                self._send(fake.models_list(headers))
            else:
                self._send(
                    fake._refuse(
                        "", 404, f"fake: no route for {self.path}", "invalid_request_error"
                    )
                )

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                reply = fake.handle(self.path, headers, raw)
            except Exception as exc:  # a bug of the fake: a 500 the test will see
                reply = fake._refuse("", 500, f"fake failed: {exc!r}", "server_error")
            self._send(reply)

        def _send(self, reply: Any) -> None:
            status, extra = 200, {}
            if isinstance(reply, Slow):
                time.sleep(reply.seconds)
                reply = reply.then
            if isinstance(reply, Malformed):
                data = reply.raw
            elif isinstance(reply, FakeError):
                status, extra, data = reply.status, reply.headers, json.dumps(reply.body).encode()
            else:
                data = json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up waiting (a Slow step): nothing to answer
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
