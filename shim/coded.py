"""Old home of `gradblock.shim.systems.coded` (issue 20 item 6): this name is an alias of that
module -- the same module object, so imports, attributes and monkeypatching keep working."""
import sys

from .systems import coded as _module

sys.modules[__name__] = _module
