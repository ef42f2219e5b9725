"""The built-in tool tasks (relay/envs/tool_tasks.py) and the tools their episodes call: python is
built in, lookup is the tools.functions entry relay.envs.keyed_values:lookup."""

TOOL_TASK_TOOLS = {"chat_tool": ("python",), "tool_chain": ("lookup", "python"), "tool_retry": ("lookup",)}
# chat_tool's expression shapes (relay/envs/chat_tool.py), by the names task.demonstrated_shapes takes
CHAT_TOOL_SHAPES = ("product", "product_plus", "sum_times", "product_minus")
