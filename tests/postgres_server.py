"""The tests' PostgreSQL: :mod:`doubles.postgres_server` (shared with the benchmarks)."""

from doubles.postgres_server import PostgresServer, pg_bin_dir

__all__ = ["PostgresServer", "pg_bin_dir"]
