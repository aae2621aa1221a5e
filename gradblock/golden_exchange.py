"""Old home of `gradblock.golden.exchange` (issue 20 item 5: the golden package): this name is an
alias of that module -- the same module object, so imports, attributes and monkeypatching keep
working."""
import sys

import gradblock.golden.exchange as _module

sys.modules[__name__] = _module
