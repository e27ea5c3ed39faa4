"""Stand-ins for the services the fleet runs, shared by the tests and the benchmarks.

``doubles.paddlex`` is the PaddleX serving protocol the PaddleX doubles answer with (the doubles
themselves: ``tests/doubles/paddlex_double.py`` for the tests, ``bench/fleet.py`` for the
benchmarks). A top-level package because both sides import it: the tests do not import
``bench``, the benchmarks do not import ``tests``.
"""
