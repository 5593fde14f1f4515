"""Peak of live tensor storage bytes, followed op by op (:class:`LiveBytes`).

The workloads measure with it on the CPU (``workloads/lm.py``: the figure CUDA's
``max_memory_allocated`` gives on a GPU) and the memory predictor traces with it on fake
tensors (``orchestrator/predict/memory_trace.py``), so that prediction and measurement count
the same bytes. It lives with the workloads' runtime: the predictor imports the workloads,
never the other way round.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages behind a tensor (a wrapper subclass such as DTensor: its inner tensors')."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
        inner = (getattr(t, name) for name in names)
        return [st for x in inner if isinstance(x, torch.Tensor) for st in _storages(x)]
    try:
        return [t.untyped_storage()]
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return []


class LiveBytes(TorchDispatchMode):
    """Peak of the bytes of live tensor storages, followed op by op.

    Every op's outputs are looked at; a storage seen for the first time adds its bytes,
    a storage's death (weak reference) takes them away, and ``UntypedStorage.resize_``
    (FSDP2 frees and re-allocates its gathered parameters that way, outside the
    dispatcher) is patched while tracking to follow the change. Tensors that exist
    before tracking starts are counted only when passed to :meth:`track`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._orig_resize = torch.UntypedStorage.resize_

    def _free(self, ref: list[int]) -> None:
        self.live -= ref[0]

    def _add(self, st: torch.UntypedStorage) -> None:
        if st in self._sizes:
            return
        size = [st.nbytes()]
        self._sizes[st] = size
        weakref.finalize(st, self._free, size)
        self.live += size[0]
        if self.live > self.peak:
            self.peak = self.live

    def track(self, *tensors: Any) -> None:
        for t in tree_flatten(tensors)[0]:
            if isinstance(t, torch.Tensor):
                for st in _storages(t):
                    self._add(st)

    def _track_output(self, out: Any) -> None:
        # An op's output is nearly always a tensor or a flat tuple of them: looked at directly
        # (tree_flatten on every op was a tenth of a trace); anything else nested is flattened.
        items = out if type(out) is tuple or type(out) is list else (out,)
        if all(x is None or isinstance(x, torch.Tensor) for x in items):
            for x in items:
                if x is not None:
                    for st in _storages(x):
                        self._add(st)
        elif not isinstance(out, (int, float, bool)):
            self.track(out)

    def reset_peak(self) -> None:
        self.peak = self.live

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._track_output(out)
        return out

    def __enter__(self) -> "LiveBytes":
        tracker = self
        orig = self._orig_resize

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            result = orig(st, size)
            known = tracker._sizes.get(st)
            if known is not None and known[0] != st.nbytes():
                tracker.live += st.nbytes() - known[0]
                known[0] = st.nbytes()
                tracker.peak = max(tracker.peak, tracker.live)
            return result

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]
