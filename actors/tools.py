"""ToolExecutor: runs tool calls for rollout workers (sandboxed code, typed functions, HTTP tools).

A plain class; relay_trainer/pools.py applies ray.remote. One executor runs up to `max_workers` calls
at once in threads (each sandboxed run is a subprocess, so threads are enough), and can also
serve the same sandbox over HTTP for workers that speak the tool-server protocol.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from actors.plumbing import RelayActor
from relay.config import SandboxConfig, ToolServerConfig
from relay.fault_points import hit
from relay.tools.calls import ToolCall
from relay.tools.registry import PythonTool, ToolRegistry, ToolResult
from relay.tools.sandbox import make_runner
from relay.tools.server import ToolServer


class ToolExecutor(RelayActor):
    # actors/plumbing.py. Counts calls where they finish (run_batch; the HTTP server's runs are not counted here).
    repr_format = "tools-{index}, {calls} calls, {errors} errors"
    index, calls, errors = 0, 0, 0

    def __init__(
        self,
        sandbox_limits: SandboxConfig | None = None,
        sandbox: str = "bwrap",
        registry: ToolRegistry | None = None,
        max_workers: int = 0,
        index: int = 0,
    ):
        """tools.sandbox_limits and tools.sandbox: "bwrap" refuses (SandboxUnavailable) where the
        sandbox cannot be built; "none" is the unsafe, loud opt-out (tools.sandbox=none)."""
        self.index = index
        self.sandbox_limits = sandbox_limits or SandboxConfig()
        self.sandbox = sandbox
        self._run = make_runner(sandbox, self.sandbox_limits)
        self.registry = registry if registry is not None else ToolRegistry()
        if "python" not in self.registry:
            self.registry.register(PythonTool(self.run_code))
        self.max_workers = max_workers or 2 * (os.cpu_count() or 1)  # see ToolServerConfig.max_concurrency
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="relay-tool")
        self._server: ToolServer | None = None

    def schemas(self) -> list[dict]:
        return self.registry.schemas()

    def sandbox_mode(self) -> str:
        """A cheap call: answers once the sandbox was built (pools.py waits on it)."""
        return self.sandbox

    def run_code(self, code: str) -> ToolResult:
        """Run Python code in the sandbox; the result as the model will see it."""
        return ToolResult.from_execution(self._run(code).to_json())

    def run_batch(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run calls in parallel (at most max_workers at once); results in call order. Never raises."""
        hit("tool.call")
        results = list(self._pool.map(self.registry.call, calls))
        self.calls, self.errors = self.calls + len(results), self.errors + sum(not r.ok for r in results)
        return results

    def start_server(self, host: str = "127.0.0.1", port: int = 0, max_concurrency: int = 0) -> str:
        """Serve this executor's sandbox over HTTP (relay.tools.server protocol); returns the URL."""
        if self._server is None:
            cfg = ToolServerConfig(
                host=host,
                port=port,
                sandbox=self.sandbox,
                sandbox_limits=self.sandbox_limits,
                max_concurrency=max_concurrency or self.max_workers,
            )
            self._server = ToolServer(cfg, runner=self._run).start()
        return self._server.url

    def stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def close(self) -> None:
        self.stop_server()
        self._pool.shutdown(wait=True)
