"""Checks that the chapter notebooks' test cells call: one module per chapter."""
