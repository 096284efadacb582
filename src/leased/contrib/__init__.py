"""Integrations with frameworks; each is an optional extra (leased[django])."""
