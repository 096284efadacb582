from leased.backends.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
