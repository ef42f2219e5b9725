"""The OpenAI-compatible endpoint a rollout worker serves from its engine, and agent programs
trained through it (task.agent): server.py, the batcher, the fence between requests and weight
loads, the run's bearer token, the per-episode token records, the samples built from them, and the
program runner."""
