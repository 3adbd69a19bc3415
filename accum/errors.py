"""The error every layer raises for bad input: ``ParamError`` (the command line prints its one line, exit status 2).

It sits below every other module (docs/families.md, "Layout"), so the engine, the theory and ``accum.runtime`` all raise the same
class; ``accum.simulations.params`` re-exports it beside the checks that raise it.
"""

from __future__ import annotations

from typing import Mapping, Sequence


class ParamError(ValueError):
    """A parameter is missing, unknown, of the wrong type or outside its allowed range.

    ``names``: the parameters the text refers to, written in it as ``{name}``.  ``message(display)`` writes
    each as ``display.get(name, name)``: a command line shows the flag that sets the parameter (``--seq-len``)
    where the library shows its field name (``seq_len``), with no guessing at the text.  ``str(err)`` is
    ``message({})``.
    """

    def __init__(self, text: str, names: Sequence[str] = ()) -> None:
        self.text, self.names = text, tuple(names)
        super().__init__(self.message({}))

    def message(self, display: Mapping[str, str]) -> str:
        out = self.text
        for name in self.names:
            out = out.replace("{" + name + "}", display.get(name, name))
        return out
