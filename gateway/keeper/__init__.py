"""The slice keeper: a small proxy in front of a host's PaddleX instances that keeps the answer
of every job slice for a while, so that a gateway restarted after a crash finds the slices it
had running instead of parsing them again. See :mod:`gateway.keeper.server`; run it with
``python -m gateway.keeper``. The gateway's side of it is :mod:`gateway.upstream.keeper_client`."""
