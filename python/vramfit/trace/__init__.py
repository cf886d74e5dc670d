"""The tracer (``python -m vramfit.trace``: frameworks' training code on a fake CUDA device).

``vramfit.trace`` is also the function ``vramfit.trace(model, make_batch)`` (tracing.py); once
this package is imported, Python makes the name ``vramfit.trace`` this package, so the
package calls the function."""
from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ..tracing import trace

        return trace(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
