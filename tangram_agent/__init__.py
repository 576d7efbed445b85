"""The Tangram node agent: registers a node's resources and runs the actions placed on it.

``tangram-agent`` (see ``__main__``) is the daemon; :class:`tangram_agent.agent.Agent`
embeds it; :mod:`tangram_agent.protocol` is the contract with the server;
:mod:`tangram_agent.executors` holds what actually runs an action. No Django
here: the agent installs on nodes without the server.
"""
