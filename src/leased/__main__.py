"""`python -m leased`: the same command as `leased`, where the script is not on PATH."""

from leased.cli.main import main

main()
