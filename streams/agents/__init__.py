"""The MCP tool server for agents: the tools (``tools.py``), the SDK server over them (``server.py``) and
its two transports, standard streams for ``edgeledger mcp`` and streamable HTTP at ``/mcp`` in ``serve``
(``transports.py``). The tenant is the server's, never a tool argument."""
