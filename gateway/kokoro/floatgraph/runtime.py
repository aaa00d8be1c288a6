"""onnxruntime sessions on the CPU or on CUDA (onnxruntime-gpu), never one silently for the other.

``embedded_provider=cuda`` needs the ``onnxruntime-gpu`` wheel (it replaces ``onnxruntime``)
and a CUDA device. ``check_provider`` refuses the setting at construction when the installed
onnxruntime has no CUDA execution provider; ``make_session`` refuses a session that
onnxruntime built on the CPU anyway (it does so, with only a log line, when the CUDA libraries
or the device are missing). On CUDA, calls go through IO binding (``BoundSession``): inputs are
copied to the device once and outputs come back to host memory in one copy each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PROVIDERS = ("cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CUDA_HINT = (
    "embedded_provider=cuda needs onnxruntime-gpu (pip uninstall -y onnxruntime && "
    "pip install onnxruntime-gpu) and a CUDA device"
)


class ProviderUnavailable(ValueError):
    """The provider asked for cannot run here (a settings fault: refused at start)."""


def check_provider(provider: str) -> None:
    """Fail at once, in one line, when ``provider`` cannot run with the onnxruntime installed."""
    if provider not in PROVIDERS:
        raise ProviderUnavailable(f"embedded_provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
    if provider == "cuda":
        import onnxruntime as ort

        available = ort.get_available_providers()
        if CUDA not in available:
            raise ProviderUnavailable(
                f"{CUDA_HINT}; this onnxruntime {ort.__version__} offers only {', '.join(available)}"
            )


def make_session(model: Any, threads: int, provider: str = "cpu", weights: Any = None) -> Any:
    """A session for ``model`` (an ``onnx.ModelProto``, or its bytes) on ``provider``: on the
    CPU ``gateway.kokoro.onnx_sessions``' session (the process's one arena, ``weights`` shared, the
    serialized copy dropped), on CUDA a ``BoundSession``. Both have ``run(output_names, feeds)``."""
    import onnxruntime as ort

    check_provider(provider)
    if provider == "cpu":
        from ..onnx_sessions import make_session as cpu_session

        if isinstance(model, bytes):
            import onnx

            model = onnx.load_from_string(model)
        return cpu_session(model, threads, weights)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors reach the caller as exceptions; don't also print them
    if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from the nvidia-* wheels (torch's) where present
        ort.preload_dlls()
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, sess_options=opts, providers=[CUDA, "CPUExecutionProvider"])
    if session.get_providers()[0] != CUDA:
        raise ProviderUnavailable(
            f"{CUDA_HINT}; onnxruntime could not start CUDA here "
            f"(session providers: {', '.join(session.get_providers())})"
        )
    return BoundSession(session)


class BoundSession:
    """A CUDA session run through IO binding, with ``InferenceSession.run``'s signature."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def __getattr__(self, name: str) -> Any:  # get_inputs(), get_outputs(), get_providers()
        return getattr(self.session, name)

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any], *_: Any) -> list[np.ndarray]:
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        names = output_names or [o.name for o in self.session.get_outputs()]
        for name in names:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        outputs: list[np.ndarray] = binding.copy_outputs_to_cpu()
        return outputs
