"""What every SQL database shares: the parts that implement the ports once (one per area, wired
by store.py), each built from a Database (database.py) over a database's dialect (dialect.py)."""
