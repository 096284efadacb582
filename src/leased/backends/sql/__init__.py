"""What every SQL database shares: the store that implements the ports once (store.py) over each
dialect's hooks, and the parts it is built from."""
