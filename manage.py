#!/usr/bin/env python
import os
import sys


def main():
    for i, arg in enumerate(sys.argv[1:], 1):
        try:
            arg.encode("utf-8")  # bytes that are not UTF-8 arrive as lone surrogates
        except UnicodeEncodeError:
            sys.exit(f"manage.py: argument {i} is not UTF-8 text")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
