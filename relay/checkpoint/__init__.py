"""Checkpoints: atomic save and verified load (atomic), sharded state through torch's distributed
checkpoint (dcp), the manifest that says a checkpoint is complete (manifest), choosing where
`--resume` starts (resume), `resources.auto_resume` (auto_resume), and random-generator state (rng)."""
