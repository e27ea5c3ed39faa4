"""Who may call: bearer tokens, their quotas and concurrency, and the local admin token.

:mod:`~gateway.access.control` checks a request's token (user or admin), its rate and its
requests in flight (over every worker process) and answers 401/403/429
(:class:`gateway.errors.AccessError`); :mod:`~gateway.access.local_token` reads the gateway's
own admin token, which only whoever can enter its container can read.
"""
