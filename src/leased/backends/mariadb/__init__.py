from leased.backends.mariadb.backend import MariaDBBackend

__all__ = ["MariaDBBackend"]
