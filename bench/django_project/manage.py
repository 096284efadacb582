#!/usr/bin/env python
"""manage.py of the Django backends benchmark's project (see bench/django_backends.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
