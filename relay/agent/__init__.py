"""The agent loop: a rollout's episodes, token-in and token-out (loop), one episode's state
(episode), the token layout of a conversation (chat), and per-batch episode summaries (metrics)."""
