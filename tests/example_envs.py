"""Example environments of relay's Python API, written as a user of BaseEnvironment writes them,
for the API's tests."""

from relay import BaseEnvironment


class TextGameEnv(BaseEnvironment):
    """Simple text-based game: take an item (+1), attack to end it (+5), anything else -0.1."""

    def reset(self) -> str:
        self.score = 0
        self.inventory = []
        return "Welcome to the game! You are in a room."

    def step(self, action: str) -> tuple:
        reward = 0.0

        if "take" in action.lower():
            self.inventory.append("item")
            reward = 1.0
        elif "attack" in action.lower():
            reward = 5.0
            self._done = True
        else:
            reward = -0.1

        self.score += reward
        return self.get_state_description(), reward, self._done, {}

    def get_state_description(self) -> str:
        return f"Score: {self.score}, Inventory: {self.inventory}"


class AdditionEnv(BaseEnvironment):
    """Two-digit sums the tiny model can answer in a few tokens, three tries."""

    def reset(self) -> str:
        self.a, self.b, self.tries = 23, 45, 0
        return f"{self.a}+{self.b}"

    def step(self, action: str) -> tuple:
        self.tries += 1
        correct = action.strip() == str(self.a + self.b)
        return f"{self.a}+{self.b}", float(correct), correct or self.tries >= 3, {}
