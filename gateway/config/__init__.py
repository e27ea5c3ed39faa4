"""The gateway's configuration: the validated ``config.json`` and its hot reload.

:mod:`~gateway.config.settings` is one pydantic model for the file (errors name the key);
:mod:`~gateway.config.reload` watches the file (and SIGHUP) and swaps a valid new config in
without a restart.
"""
