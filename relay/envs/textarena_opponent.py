"""task.opponent=frozen_policy: the other seat of a two-player textarena game is played by the run's
starting model (model.path, as a folder: the EnvPool resolves `tiny`, a GGUF or a named model as
the driver does, actors/env.py), frozen for the whole run.

    task: {name: textarena, env_id: TicTacToe-v0, opponent: frozen_policy, opponent_temperature: 0}

Where it runs. In the EnvPool actor that runs the game (relay/envs/textarena.py asks it for a move
between the learner's moves): loaded once per actor process, on its first move, with transformers
on the CPU, one torch thread (the pool shares its node with the learner and the engines), eval
mode, no gradients. Weight syncs go to the rollout engines only, never to an EnvPool, and the
weights are read from model.path, not shared with any other role: the opponent stays the
starting policy while the learner moves away from it (a fixed snapshot, the simplest of
self-play's opponent pools).

How it plays. As the learner does: the same system prompt, the game's messages since its last move
as the user's turn (the learner's moves as "Opponent's move: ..."), its own moves as the
assistant's, through the model's chat template. Greedy at temperature 0, else sampled from
softmax(logits / temperature) with a generator seeded from the game's seed (reproducible, and no
draw from the process's RNG), up to max_tokens tokens per move, ending at the end-of-turn token or
at rollout.stop's strings as the engines end the policy's turns (the token whose text holds one is
the last, kept). Its text becomes a move exactly as the learner's does (brackets added where the
game's default version adds them); an invalid move is the game's to judge, warned and then lost,
and counted apart (env/opponent_invalid_moves).
"""

from __future__ import annotations

import functools
import threading

from relay.config.textarena import FROZEN_POLICY

__all__ = ["FROZEN_POLICY", "FrozenPolicy", "frozen_policy"]
_LOADING = threading.Lock()  # one load per process, even if two games ask for their first move at once


class FrozenPolicy:
    """A causal LM and its tokenizer, on the CPU, read-only: `move(messages, ...)` -> the reply's text."""

    def __init__(self, model, tokenizer):
        from relay.envs.chat import ChatFormat

        self.model, self.tokenizer = model.eval().requires_grad_(False), tokenizer
        self.format = ChatFormat(tokenizer, prompt_format="chat")
        eos = model.generation_config.eos_token_id
        self.stop_ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}

    def move(
        self, messages: list[dict], temperature: float, max_tokens: int, seed: int, stop: tuple[str, ...] = ()
    ) -> str:
        import torch

        prompt = self.format.prompt_ids(messages)
        generator = torch.Generator().manual_seed(seed)
        tokens: list[int] = []
        with torch.inference_mode():
            step, past = torch.tensor([prompt]), None
            for _ in range(max_tokens):
                out = self.model(input_ids=step, past_key_values=past, use_cache=True)
                logits, past = out.logits[0, -1].float(), out.past_key_values
                if temperature > 0:
                    token = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator))
                else:
                    token = int(logits.argmax())
                tokens.append(token)
                if token in self.stop_ids or (stop and any(s in self.tokenizer.decode(tokens) for s in stop)):
                    break
                step = torch.tensor([[token]])
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


def frozen_policy(folder: str, tokenizer_folder: str | None = None, trust_remote_code: bool = False) -> FrozenPolicy:
    """This process's copy of the model in `folder`, loaded on the first call."""
    with _LOADING:
        return _load(folder, tokenizer_folder, trust_remote_code)


@functools.cache
def _load(folder: str, tokenizer_folder: str | None, trust_remote_code: bool) -> FrozenPolicy:
    import torch
    import transformers

    torch.set_num_threads(1)  # the EnvPool's CPU share: the learner and the engines keep the cores
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        tokenizer_folder or folder, trust_remote_code=trust_remote_code
    )
    # float32 whatever model.dtype says: CPU matmuls in half precision are slower, not faster
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, trust_remote_code=trust_remote_code
    )
    return FrozenPolicy(model, tokenizer)
