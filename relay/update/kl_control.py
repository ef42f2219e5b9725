"""KL coefficient controllers: plain Python (no tensors), so the driver that keeps the coefficient
needs no torch. The per-token KL estimators they scale are relay/algos/kl.py."""

from __future__ import annotations

from typing import Protocol

# ---------------------------------------------------------------------------------------------
# coefficient controllers


class KLController(Protocol):
    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, d: dict) -> None: ...


class FixedKLController:
    """A constant coefficient."""

    def __init__(self, coef: float):
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"kind": "fixed", "value": self.value}

    def load_state_dict(self, d: dict) -> None:
        self.value = float(d["value"])


class AdaptiveKLController:
    """Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences"), sec. 2.2:
    steer the coefficient so the observed KL tracks `target`.

        err = clip(current_kl / target - 1, -0.2, 0.2)
        coef <- coef * (1 + err * n_steps / horizon)

    n_steps is the number of samples the KL was measured over (the batch size), so `horizon`
    is in samples. Clipping the error keeps one noisy KL reading from moving the coefficient
    by more than 20% of n_steps/horizon.
    """

    def __init__(self, init_coef: float, target: float, horizon: int):
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target and horizon must be > 0, got target={target}, horizon={horizon}")
        self.value = float(init_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        err = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + err * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"kind": "adaptive", "value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, d: dict) -> None:
        # Only the learned coefficient is restored; target and horizon come from the config, so
        # a resumed run may change them.
        self.value = float(d["value"])


def make_kl_controller(kind: str, coef: float, target: float, horizon: int):
    """ "fixed" keeps `coef`; "adaptive" steers it towards `target` KL (Ziegler et al. 2019)."""
    if kind == "adaptive":
        return AdaptiveKLController(coef, target, horizon)
    if kind == "fixed":
        return FixedKLController(coef)
    raise ValueError(f"unknown KL controller {kind!r}: choose fixed or adaptive")
