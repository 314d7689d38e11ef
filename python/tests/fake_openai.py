"""A fake OpenAI-compatible chat-completions endpoint: a real HTTP server on
loopback speaking the real API (tool calls included), whose replies a test
scripts. It stands in for the hosted model, the one part that cannot run
here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

#: A scripted reply: given the request's messages, the assistant message.
Reply = Callable[[List[Dict[str, Any]]], Dict[str, Any]]


def tool_call(call_id: str, name: str, arguments: Dict[str, Any]) -> Reply:
    """A reply that calls one tool."""
    return lambda messages: {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


def final_text(render: Callable[[List[Dict[str, Any]]], str]) -> Reply:
    """A reply with text made from the conversation so far (e.g. the last tool result)."""
    return lambda messages: {"role": "assistant", "content": render(messages)}


class FakeOpenAI:
    """Serves `POST /v1/chat/completions`, answering with the scripted
    replies in order; keeps every request body."""

    def __init__(self, replies: List[Reply]) -> None:
        self.replies = list(replies)
        self.requests: List[Dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = fake._answer(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _answer(self, path: str, body: Dict[str, Any]) -> tuple:
        if not path.endswith("/chat/completions"):
            return 404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}}
        self.requests.append(body)
        if not self.replies:
            return 500, {"error": {"message": "the test scripted no more replies", "type": "server_error"}}
        message = self.replies.pop(0)(body["messages"])
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    def __enter__(self) -> "FakeOpenAI":
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def last_tool_result(messages: List[Dict[str, Any]]) -> Any:
    """The content of the last `tool` message, parsed as JSON."""
    content = [m for m in messages if m["role"] == "tool"][-1]["content"]
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    return json.loads(content)
