"""The `leased` command line (leased.cli.main:main). Kept out of `import leased`: only the CLI needs click."""
