"""What the gateway tells about itself: metrics, logs and the request context.

:mod:`~gateway.observability.metrics` is the Prometheus registry of one gateway,
:mod:`~gateway.observability.worker_metrics` gathers every worker process's series into one
``/metrics``; :mod:`~gateway.observability.logs` is the log format and the batched access log;
:mod:`~gateway.observability.context` is each request's id and token name, which its log
lines, metrics and error body carry.
"""
