"""Old home of `gradblock.shim.systems.merge_measure` (issue 20 item 6): this name is an alias of that
module -- the same module object, so imports, attributes and monkeypatching keep working."""
import sys

from .systems import merge_measure as _module

sys.modules[__name__] = _module
