"""Built-in task: a one-room text game with per-turn rewards (configs/textgame.yaml).

    system: Text game. Actions: look, take <item>, attack <monster>.
    user:   You are in a cave. You see: apple, sword. A goblin is here.
    model:  take sword          -> "You take the sword."              +0.5
    model:  attack goblin       -> "You defeat the goblin. You win!"  +1.0, done

Taking a junk item earns nothing, attacking without a weapon loses (-0.5, done), anything else
costs -0.1. The best episode earns 1.5; the driver's held-out accuracy counts wins (return >= 1).
Each step's reward lands on the last token of the turn that took it (Sample.token_rewards).
"""

from __future__ import annotations

import random
from typing import Any

from relay.envs.chat import ScriptedEpisode, ScriptedTurn

# Small name sets: the tiny model must read the room to act, but copying a name is not what
# limits it; which item to take and when to attack is what RL has to learn.
WEAPONS = ("sword", "axe", "bow")
JUNK = ("apple", "coin", "rope")
MONSTERS = ("goblin", "troll", "rat")
ROOMS = ("cave", "hall", "forest")
PREFIX = "Text game. Actions: look, take <item>, attack <monster>."


class TextGameEnv:
    warm_start_steps = 400  # relay/models/warm_start.py

    def reset(self, room: str, items: list[str], monster: str, **_: Any) -> str:
        self.room, self.items, self.monster = room, list(items), monster
        self.inventory: list[str] = []
        return self.get_state_description()

    def get_prompt_prefix(self) -> str:
        return PREFIX

    def get_state_description(self) -> str:
        carry = f" You carry: {', '.join(self.inventory)}." if self.inventory else ""
        return (
            f"You are in a {self.room}. You see: {', '.join(self.items) or 'nothing'}. A {self.monster} is here.{carry}"
        )

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        verb, _, obj = action.strip().lower().partition(" ")
        obj = obj.strip().removeprefix("the ").strip()
        if verb == "look" and not obj:
            return self.get_state_description(), 0.0, False, {"valid": True}
        if verb == "take" and obj in self.items:
            self.items.remove(obj)
            self.inventory.append(obj)
            return f"You take the {obj}.", (0.5 if obj in WEAPONS else 0.0), False, {"valid": True}
        if verb == "attack" and obj == self.monster:
            if any(i in WEAPONS for i in self.inventory):
                return f"You defeat the {obj}. You win!", 1.0, True, {"valid": True, "won": True}
            return f"The {obj} is too strong without a weapon. You lose.", -0.5, True, {"valid": True, "won": False}
        if verb in ("take", "attack"):
            return f"There is no {obj or 'such thing'} here.", -0.1, False, {"valid": False}
        return "Unknown action. Try: look, take <item>, attack <monster>.", -0.1, False, {"valid": False}

    @staticmethod
    def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        rows = []
        for _ in range(n):
            items = [rng.choice(WEAPONS), rng.choice(JUNK)]
            rng.shuffle(items)
            rows.append(
                {"room": rng.choice(ROOMS), "items": items, "monster": rng.choice(MONSTERS), "ground_truth": None}
            )
        return rows

    @classmethod
    def warm_start_episodes(cls, n: int, seed: int) -> list[ScriptedEpisode]:
        """Played by a noisy script: often the best line, often a detour or a loss."""
        rng = random.Random(seed)
        out = []
        for row in cls.make_rows(n, seed):
            env = cls()
            first = env.reset(**row)
            weapon = next(i for i in row["items"] if i in WEAPONS)
            junk = next(i for i in row["items"] if i not in WEAPONS)
            plan = rng.choices(
                [
                    [f"take {weapon}", f"attack {row['monster']}"],
                    ["look", f"take {weapon}", f"attack {row['monster']}"],
                    [f"take {junk}", f"take {weapon}", f"attack {row['monster']}"],
                    [f"take {junk}", f"attack {row['monster']}"],
                    [f"attack {row['monster']}"],
                ],
                weights=[4, 1, 2, 2, 2],
            )[0]
            turns = []
            for action in plan:
                obs, _, done, _ = env.step(action)
                turns.append(ScriptedTurn(action, observation=None if done else [{"role": "user", "content": obs}]))
            out.append(
                ScriptedEpisode([{"role": "system", "content": PREFIX}, {"role": "user", "content": first}], turns)
            )
        return out
