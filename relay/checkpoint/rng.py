"""Every random generator's state, JSON-able, for exact resume: Python's `random`, numpy's global
generator, and torch's (CPU, every CUDA device) in a process that has loaded torch.

A process that never imported torch (the driver of most runs) draws nothing from torch's
generator, so its state is left out rather than importing torch to read it; a checkpoint that
holds it (an actor's, or a driver's that had torch loaded) restores it.
"""

from __future__ import annotations

import random
import sys
import warnings

import numpy as np


def capture_rng() -> dict:
    """Python `random`, numpy's global generator, torch CPU and (if present) every CUDA device."""
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state(legacy=True)
    rng = {
        "python": [py_version, list(py_internal), py_gauss],
        "numpy": [np_name, np_keys.tolist(), int(np_pos), int(np_has_gauss), float(np_cached)],
    }
    if "torch" not in sys.modules:
        return rng
    import torch

    rng["torch_cpu"] = torch.get_rng_state().tolist()
    if torch.cuda.is_available():
        rng["torch_cuda"] = [state.tolist() for state in torch.cuda.get_rng_state_all()]
    return rng


def restore_rng(rng: dict) -> None:
    py_version, py_internal, py_gauss = rng["python"]
    random.setstate((py_version, tuple(py_internal), py_gauss))
    np_name, np_keys, np_pos, np_has_gauss, np_cached = rng["numpy"]
    np.random.set_state((np_name, np.array(np_keys, dtype=np.uint32), np_pos, np_has_gauss, np_cached))
    if "torch_cpu" not in rng:  # captured where torch was not loaded
        return
    import torch

    torch.set_rng_state(torch.tensor(rng["torch_cpu"], dtype=torch.uint8))
    cuda_states = rng.get("torch_cuda")
    if cuda_states is None:
        return
    # Resuming on a different machine is legitimate; the run continues, just not bit-identically.
    if not torch.cuda.is_available():
        warnings.warn("checkpoint holds CUDA RNG states but CUDA is not available; not restored", stacklevel=2)
        return
    count = torch.cuda.device_count()
    if count != len(cuda_states):
        warnings.warn(
            f"checkpoint holds {len(cuda_states)} CUDA RNG states, this process sees {count} devices", stacklevel=2
        )
    for device, state in enumerate(cuda_states[:count]):
        torch.cuda.set_rng_state(torch.tensor(state, dtype=torch.uint8), device)
