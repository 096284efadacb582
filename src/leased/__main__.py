"""`python -m leased`: the same command as `leased`, where the script is not on PATH."""

from leased.cli.main import main

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages, a docs tool) runs nothing
    main()
