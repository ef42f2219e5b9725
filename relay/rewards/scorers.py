"""The two kinds of reward model (reward_model.kind): each scores a list of Samples and says why
a sample has no score (None where it has one).

    scorer = make_scorer(settings, path)     # ClassifierScorer or JudgeScorer (RewardModelSettings)
    scores, errors = scorer.score(samples)   # scores[i] is None exactly where errors[i] is not

The classifier re-renders every sample from its messages with its own tokenizer and chat template
(relay.rewards.reward_model.conversation); the judge builds one user message per sample from
reward_model.judge.template, generates with one of relay's engines and parses the answer.
"""

from __future__ import annotations

import torch

from relay.config.role_settings import RewardModelSettings
from relay.rewards.reward_model import conversation, judge_prompt, parse_verdict, verdict_parser
from relay.types import Sample

Scores = tuple[list[float | None], list[str | None]]


class ClassifierScorer:
    """A sequence classifier with one label (AutoModelForSequenceClassification): its logit is the score."""

    def __init__(
        self,
        path: str,
        dtype: str = "float32",
        trust_remote_code: bool = False,
        max_length: int = 1024,
        micro_batch_size: int = 32,
    ):
        from transformers import AutoModelForSequenceClassification

        from relay.models.loading import actor_device, load_tokenizer

        self.tokenizer = load_tokenizer(path, trust_remote_code)
        self.device = actor_device()
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
        ).to(self.device)
        self.model.eval()
        self.pad_id = self.tokenizer.pad_token_id
        if self.model.config.pad_token_id is None:  # the model finds each row's last token by its padding
            self.model.config.pad_token_id = self.pad_id
        self.max_length, self.micro_batch_size = max_length, micro_batch_size

    def render(self, sample: Sample) -> list[int]:
        """The sample's conversation in the RM's own chat template, as the RM's own token ids; a
        conversation longer than max_length keeps its end (where the answer is)."""
        text = self.tokenizer.apply_chat_template(conversation(sample), tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        return ids[-self.max_length :]

    @torch.no_grad()
    def score_ids(self, rows: list[list[int]]) -> list[float]:
        """One logit per row of token ids, micro-batch by micro-batch (right-padded)."""
        out: list[float] = []
        for start in range(0, len(rows), self.micro_batch_size):
            chunk = rows[start : start + self.micro_batch_size]
            width = max(map(len, chunk))
            ids = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in chunk], device=self.device)
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in chunk], device=self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits  # [B, 1]
            out += logits[:, 0].float().cpu().tolist()
        return out

    def score(self, samples: list[Sample]) -> Scores:
        scores = self.score_ids([self.render(s) for s in samples])
        return list(scores), [None] * len(samples)


class JudgeScorer:
    """A generative judge on relay's engines (reward_model.judge.engine): greedy answers, parsed."""

    def __init__(self, settings: RewardModelSettings, path: str):
        from relay.engines import make_engine
        from relay.envs.chat import ChatFormat

        rm = settings.reward_model
        self.judge = rm.judge
        self.engine = make_engine(settings.judge_engine, path)
        self.tokenizer = self.engine.tokenizer
        self.format = ChatFormat(self.tokenizer, prompt_format="chat")
        self.parser = verdict_parser(self.judge.parser)
        self.micro_batch_size = rm.micro_batch_size

    def prompt_ids(self, sample: Sample) -> list[int]:
        return self.format.prompt_ids([{"role": "user", "content": judge_prompt(self.judge.template, sample)}])

    def verdicts(self, samples: list[Sample]) -> list[str]:
        from relay.engines.base import SamplingParams

        params = SamplingParams(n=1, temperature=0.0, max_tokens=self.judge.max_new_tokens, seed=0)
        texts: list[str] = []
        for start in range(0, len(samples), self.micro_batch_size):
            chunk = [self.prompt_ids(s) for s in samples[start : start + self.micro_batch_size]]
            for group in self.engine.generate(chunk, params):
                texts.append(self.tokenizer.decode(group[0].token_ids, skip_special_tokens=True))
        return texts

    def score(self, samples: list[Sample]) -> Scores:
        scores: list[float | None] = []
        errors: list[str | None] = []
        for text in self.verdicts(samples):
            try:
                scores.append(parse_verdict(self.parser, text))
                errors.append(None)
            except Exception as e:  # a malformed verdict (or a parser that raised on it) is data
                scores.append(None)
                errors.append(f"judge verdict: {e}")
        return scores, errors


def make_scorer(settings: RewardModelSettings, path: str) -> ClassifierScorer | JudgeScorer:
    rm = settings.reward_model
    if rm.kind == "judge":
        return JudgeScorer(settings, path)
    return ClassifierScorer(path, rm.dtype, rm.trust_remote_code, rm.max_length, rm.micro_batch_size)
