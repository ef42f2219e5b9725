"""Tools for agentic rollouts: call parsers, the tool registry, the code sandbox, the tool server and its client.

relay.tools.parsers   get_parser(name).parse(text) -> ParseResult(calls, errors)
relay.tools.registry  ToolRegistry, tool, RemoteHTTPTool, PythonTool, ToolResult
relay.tools.schema    function_schema(fn), validate_arguments(name, arguments, parameters)
relay.tools.sandbox   SandboxConfig, run_code, sandbox_available, make_runner
relay.tools.server    python -m relay.tools.server --port 30003
relay.tools.client    ToolClient(ToolsConfig(server_url=...)).execute(code)   (relay.config.ToolsConfig)
"""
