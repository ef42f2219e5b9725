"""Weights from the learner to the rollout workers: the encodings (transfer), shared memory on one
node (shared_memory), weights held until a busy worker pauses (staged), and the authenticated
store behind the broadcast group (signed_store)."""
