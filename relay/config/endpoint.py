"""endpoint.*: the OpenAI-compatible HTTP endpoint a rollout worker serves from its engine
(relay/endpoint/), and task.agent, the agent program trained through it; with their checks.

`task.agent: my_pkg.module:run` names `run(client, row) -> float | dict` (sync or async). Each
episode gets its own `openai.OpenAI` (or `AsyncOpenAI`) client pointed at the endpoint of the
rollout worker running it; the endpoint records every call's exact token ids (docs/agents.md).
The checks of these keys: relay/config/validate_endpoint.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EndpointConfig:
    enabled: bool = False  # serve /v1 on every rollout worker; task.agent turns it on by itself
    # None: the node's address (127.0.0.1 for a Ray that relay started locally; reachable from the
    # cluster's other nodes on a cluster); else the address to bind, e.g. 127.0.0.1.
    host: str | None = None
    port: int = 0  # 0: a free port (each worker on a node needs its own)
    # The model's tool-call format: replies carry `tool_calls` parsed by relay.tools.parsers.PARSERS[parser].
    parser: str = "hermes"
    model_name: str | None = None  # the id /v1/models lists; None: model.path
    # A batch of requests goes to the engine once every live episode waits on one, or this long
    # after the last request arrived: concurrent episodes share generate calls.
    batch_wait_ms: float = 5.0
    # The bearer token every endpoint of the run accepts (one per run: relay/endpoint/auth.py).
    # None: RELAY_ENDPOINT_TOKEN from the driver's environment, else a random one made when the run
    # starts. A secret: left out of repr and of the config the run writes out (Config.to_dict).
    token: str | None = field(default=None, repr=False)
    # Hostile or broken clients (relay/endpoint/connections.py): a connection that has sent no whole
    # request head this long after it opened or got its last reply is closed; a request body must
    # arrive within body_timeout_s (else 408). Open connections are capped per process (lowered to
    # half the process's open-file limit) and per peer address; past a cap a new connection takes
    # the place of the oldest idle one, or gets a 503 when none is idle.
    idle_timeout_s: float = 30.0
    body_timeout_s: float = 30.0
    max_connections: int = 1024
    max_connections_per_peer: int = 512
