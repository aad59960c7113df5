"""Checks that the chapter notebooks' test cells call: one module per chapter."""
from .common import show_failures_briefly

show_failures_briefly()
