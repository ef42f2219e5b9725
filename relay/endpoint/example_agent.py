"""An agent program as relay trains it (configs/agent.yaml: `task.agent: relay.endpoint.example_agent:run`).

It is written against the `openai` client only: relay hands it a client per episode, already
pointed at the rollout worker's endpoint, and a row of the task; it returns the reward. It asks
the built-in arithmetic question in a chat and checks the answer. Nothing in it knows about relay.
"""

from __future__ import annotations


def run(client, row: dict) -> float:
    reply = client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": row["prompt"]}],
        max_tokens=8,
    )
    answer = (reply.choices[0].message.content or "").strip()
    return float(answer == str(row["ground_truth"]))
