"""Autograding for instructors: `python -m autograde <command>` from the repository root."""
import importlib.util
import sys
from pathlib import Path

# autograde.nested is the checks' own chapters/checks/nested.py (the kit ships it as
# checks/nested.py): one walk over nested values for the checks, the wire and both sides of
# the RPC, loaded by path. The sandbox has the same file bound at the same place.
NESTED = Path(__file__).resolve().parent.parent / "chapters" / "checks" / "nested.py"
if __name__ + ".nested" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(__name__ + ".nested", NESTED)
    nested = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = nested
    _spec.loader.exec_module(nested)
