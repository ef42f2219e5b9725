"""relay from Python: the names user code imports (`from relay import ConfigStore, algo, ...`).

    config_store.py  ConfigStore: the config tree set by attribute, under other setups' field names too
    algo.py          the PPO math under its usual argument names, over relay.algos
    inference.py     create_inference_engine, MultiTurnInferenceEngine, BatchInferenceManager
    tools.py         Tool, MultiTurnManager, the parsers' other names

RayPPOTrainer is the layer above (it drives Ray actors): relay_trainer/ppo_trainer.py.
"""
