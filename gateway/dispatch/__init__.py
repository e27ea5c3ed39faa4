"""Which upstream serves: the pool of upstreams, the central queue, balancing and health.

Pure asyncio state, no I/O but the health probes. :mod:`~gateway.dispatch.upstreams` is one
upstream's state and the lease of one attempt; :mod:`~gateway.dispatch.pool` leases and
releases them, put together from choosing (:mod:`~gateway.dispatch.choosing`, with the
:mod:`~gateway.dispatch.policies`), leasing (:mod:`~gateway.dispatch.leasing`, counted in
:mod:`gateway.shared.counters`) and queueing (:mod:`~gateway.dispatch.queueing`; the
:mod:`~gateway.dispatch.central_queue` holds the requests that wait, fair among tenants);
:mod:`~gateway.dispatch.outlier` ejects failing and stuck upstreams and
:mod:`~gateway.dispatch.health` probes them; :mod:`~gateway.dispatch.drain` takes upstreams out
of dispatch on request; :mod:`~gateway.dispatch.handoff` gives a free upstream to the oldest
waiter of any worker process.
"""
