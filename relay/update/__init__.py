"""The update, learner side: a step's Batch (batch), the epochs x mini-batches loop (loop), where
old logprobs come from (old_logprobs), forward passes (policy), FSDP2 rank groups (fsdp), the
learning-rate schedule, KL coefficient control and DAPO's sample-level steps."""
