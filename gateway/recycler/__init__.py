"""The PaddleX recycler: restarts, one at a time per host, a PaddleX instance whose container
memory passed a limit or that has served a number of documents, with a drain around it.

PaddleX processes grow in memory over long runs (tens of GB after long PDFs); a restart gives
it back. The recycler runs in its own container on each host (the stack config key `recycle`,
components/recycler.py), with that host's Docker socket; it drains and undrains through the
gateway's admin API. The decisions are plain functions (:mod:`.policy`, :mod:`.counters`); the
I/O is a thin loop (:mod:`.loop`).
"""
