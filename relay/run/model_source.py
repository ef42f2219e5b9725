"""The model every role loads, found and checked in the driver before Ray or any actor starts
(pure: no ray)."""

from __future__ import annotations

from relay.config import ConfigError, CriticConfig, ModelConfig, RewardModelConfig, TaskConfig, ToolsConfig
from relay.models.check import check_model_source, check_reward_model
from relay.models.resolve import is_named_model, model_folder
from relay.models.template_drift import check_template_drift


def resolve_model_path(
    m: ModelConfig, task: TaskConfig, tools: ToolsConfig, critic: CriticConfig, reward_model: RewardModelConfig
) -> str:
    """The folder (or hub name) every role loads (relay/models/resolve.py): `tiny` is a model shipped
    in the repository (the task's own warm start for the built-in agent tasks); a GGUF file or
    `smollm2-135m` is converted once into a cached folder, here, before any actor starts. Any other
    folder or hub name is checked here, before Ray or an actor starts (ConfigError), and so are
    the tokenizer, a multi-turn run's chat template (task and tools say whether the run is one),
    the critic's own model and the reward model."""
    path = model_folder(m.path, "model.path", task.env)
    if not is_named_model(m.path):
        check_model_source(path, "model.path", m.trust_remote_code, tokenizer=m.tokenizer_path is None)
    if m.lora.rank:  # LoRA target modules that match nothing: one line now, not in the learner
        from relay.models.lora import target_module_problem

        if problem := target_module_problem(m, path):
            raise ConfigError([problem])
    if m.tokenizer_path is not None:
        tokenizer = model_folder(m.tokenizer_path, "model.tokenizer_path")  # a GGUF is converted now
        check_model_source(tokenizer, "model.tokenizer_path", model=False)
    # multi-turn runs: the template renders the tokens the agent loop appends
    check_template_drift(m, task, tools, path)
    if critic.enabled and critic.model_path is not None:
        critic_folder = model_folder(critic.model_path, "critic.model_path")
        check_model_source(critic_folder, "critic.model_path", m.trust_remote_code, tokenizer=False)
    if reward_model.path is not None:
        check_reward_model(reward_model)  # a sequence classifier (kind=classifier) with a chat template
    return path
