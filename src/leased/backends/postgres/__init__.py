from leased.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
