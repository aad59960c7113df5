"""Autograding for instructors: `python -m autograde <command>` from the repository root."""
