"""Client of the tool server (relay.tools.server). Its settings are the tools.* keys of the config
tree (relay.config.ToolsConfig):

    tools.enabled=true tools.server_url=http://127.0.0.1:30003 tools.max_tool_turns=3
    tools.max_retries=3 tools.retry_delay=1.0 tools.timeout=30.0 tools.max_workers=10 tools.request_interval=0.1

`execute(code)` and `execute_batch(codes)` return ToolResults and never raise. Outputs longer
than tools.sandbox_limits.max_output_bytes are cut with "...[truncated N bytes]".

Retries are only for failures where the server never answered: connection refused or reset
before a response, and 502/503/504 from the server or a proxy in front of it. A request that got
a result (whatever the code did) or a 4xx (429 "full" included) is never retried, and neither is
a time-out while waiting for the answer (the code may be running; a retry would run it twice).
`timeout` is the deadline for the whole call, retries and back-off included. A body over
tools.max_body_bytes is refused here, never sent. Every request names this client in the
X-Relay-Client header, signed in X-Relay-Signature with RELAY_TOOL_SECRET where this process has
it, so the server's fair queue tells one rollout worker's calls from another's; the server counts
an unsigned id by the peer's address instead (relay/tools/client_auth.py).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from relay.config import ConfigError, ToolsConfig, validate_sandbox_limits, validate_tool_client
from relay.tools.client_auth import CLIENT_HEADER, SIGNATURE_HEADER, secret_from_env, sign
from relay.tools.registry import ToolResult

_RETRY_STATUS = (502, 503, 504)
_client_numbers = itertools.count()


def truncate(text: str, max_bytes: int) -> str:
    """Cut text to max_bytes of UTF-8 with a visible marker saying how much was dropped."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore") + f"\n...[truncated {len(data) - max_bytes} bytes]"


class _Retry(Exception):
    """A failure where the server did not answer: safe to try again."""


class ToolClient:
    def __init__(self, cfg: ToolsConfig, secret: bytes | None = None):
        """cfg.server_url must be set; the knobs are checked as validate() checks tools.*. `secret`
        signs this client's id; None: RELAY_TOOL_SECRET from the environment, if set."""
        problems = validate_tool_client(cfg) + validate_sandbox_limits(cfg.sandbox_limits, "tools.sandbox_limits.")
        if cfg.server_url is None:
            problems.insert(0, "tools.server_url: a tool client needs the server's http(s)://host:port, got None")
        if problems:
            raise ConfigError(problems)
        self.cfg = cfg
        parts = urlsplit(cfg.server_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path.rstrip("/") + "/execute"
        self._pace_lock = threading.Lock()
        self._next_start = 0.0
        # Unique per client object across a cluster: host, process, and a counter in the process.
        self.client_id = f"{socket.gethostname()}/{os.getpid()}/{next(_client_numbers)}"[-128:]
        self._headers = {"Content-Type": "application/json", CLIENT_HEADER: self.client_id}
        secret = secret if secret is not None else secret_from_env()
        if secret:
            self._headers[SIGNATURE_HEADER] = sign(secret, self.client_id)

    # -- one request ---------------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _attempt(self, body: bytes, timeout: float) -> ToolResult:
        conn = self._connection(timeout)
        try:
            try:
                conn.request("POST", self._path, body=body, headers=self._headers)
            except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as e:
                raise _Retry(f"cannot reach the tool server at {self.cfg.server_url}: {e}") from None
            try:
                resp = conn.getresponse()
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
                raise _Retry(f"tool server closed the connection before answering: {e}") from None
            data = resp.read()
            if resp.status in _RETRY_STATUS:
                raise _Retry(f"tool server answered HTTP {resp.status}: {_error_of(data)}")
            if resp.status != 200:
                return ToolResult(False, "", f"tool server rejected the request: HTTP {resp.status}: {_error_of(data)}")
            try:
                payload = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return ToolResult(False, "", "tool server sent a response that is not JSON")
            if not isinstance(payload, dict):
                return ToolResult(False, "", "tool server sent an unexpected response")
            return ToolResult.from_execution(payload)
        finally:
            conn.close()

    def _pace(self) -> None:
        """Space request starts by request_interval (across threads), so a client never bursts."""
        if self.cfg.request_interval <= 0:
            return
        with self._pace_lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self.cfg.request_interval
        if start > now:
            time.sleep(start - now)

    def execute(self, code: str) -> ToolResult:
        """Run code on the tool server. Failures come back as ToolResult(ok=False, error=...)."""
        t0 = time.monotonic()
        deadline = t0 + self.cfg.timeout
        try:
            body = json.dumps({"code": code}).encode("utf-8", errors="surrogatepass")
        except (TypeError, ValueError) as e:
            return ToolResult(False, "", f"cannot encode the code: {e}", 0.0)
        if len(body) > self.cfg.max_body_bytes:
            return ToolResult(
                False,
                "",
                f"tool call not sent: its request body is {len(body)} bytes, over tools.max_body_bytes "
                f"({self.cfg.max_body_bytes})",
                0.0,
            )
        last = "no attempt made"
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                delay = self.cfg.retry_delay * 2 ** (attempt - 1)
                if time.monotonic() + delay >= deadline:
                    break
                time.sleep(delay)
            self._pace()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                res = self._attempt(body, remaining)
            except _Retry as e:
                last = str(e)
                continue
            except TimeoutError:
                return self._finish(
                    ToolResult(False, "", f"tool server did not answer within {self.cfg.timeout:g} s"), t0
                )
            except (OSError, http.client.HTTPException) as e:  # DNS, unreachable network, protocol errors
                return self._finish(ToolResult(False, "", f"tool server request failed: {e}"), t0)
            return self._finish(res, t0)
        return self._finish(
            ToolResult(
                False,
                "",
                f"tool server unavailable after {attempt + 1} attempt(s) in {time.monotonic() - t0:.1f} s: {last}",
            ),
            t0,
        )

    def _finish(self, res: ToolResult, t0: float) -> ToolResult:
        res.output = truncate(res.output, self.cfg.sandbox_limits.max_output_bytes)
        res.seconds = time.monotonic() - t0
        return res

    def execute_batch(self, codes: list[str]) -> list[ToolResult]:
        """Run many snippets with up to max_workers requests in flight; results in input order."""
        if not codes:
            return []
        with ThreadPoolExecutor(
            max_workers=min(self.cfg.max_workers, len(codes)), thread_name_prefix="relay-tool-client"
        ) as pool:
            return list(pool.map(self.execute, codes))

    def health(self) -> dict | None:
        """The server's /health answer, or None when it does not answer."""
        conn = self._connection(min(5.0, self.cfg.timeout))
        try:
            conn.request("GET", self._path[: -len("/execute")] + "/health")
            resp = conn.getresponse()
            return json.loads(resp.read()) if resp.status == 200 else None
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            return None
        finally:
            conn.close()


def _error_of(data: bytes) -> str:
    try:
        payload = json.loads(data)
        if isinstance(payload, dict) and payload.get("error"):
            return str(payload["error"])
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return data[:200].decode("utf-8", errors="replace").strip() or "(empty body)"
