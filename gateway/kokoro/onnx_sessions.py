"""How the embedded engine makes its onnxruntime sessions so that they do not pay twice.

The engine runs up to four sessions cut from one model (the whole model; the encoder, the exact
vocoder and the frozen vocoder of ``gateway.kokoro.vocoder``). Measured on the shipped int8 model
(``bench engine``, docs/BENCHMARKS.md), memory went to four places, each handled here:

* **The serialized model, kept by the Python wrapper** (``InferenceSession._model_bytes``):
  246 MB over the four sessions, for nothing. Dropped once the session exists.
* **Weights, once per session.** ``SharedWeights`` hands every session the same buffers for the
  ``ConvInteger`` weights (55 of the model's 91 MB) through ``SessionOptions.add_initializer``:
  onnxruntime reads those in place. Weights of ops that pre-pack (``MatMulInteger``, the LSTMs,
  ``ConvTranspose``) are not shared: each session re-packs them into a copy of its own and drops
  the original, so sharing one would only keep one more copy alive (measured: no gain). The
  Python API has no ``PrepackedWeightsContainer`` that could share the packed copies.
* **An arena per session.** onnxruntime's CPU arena keeps the peak activation memory of every
  session for good (170-280 MB each after one 8 s sentence). Here every session draws on one
  arena registered with onnxruntime's environment (``session.use_env_allocators``): one peak
  instead of four, the same CPU time per call. (Without an arena the peak of the same call is
  2.3x higher, 1 GB: onnxruntime plans buffer reuse only with one.)
* **Memory nothing uses any more.** Parsing and cutting the graph needs a few hundred MB for a
  moment, and the arena keeps the last long call's activations. ``release_freed_memory``
  shrinks the arena and hands the C allocator's free pages back (glibc's ``malloc_trim``); the
  engine calls it after start-up, after the vocoder's build, and when it has been idle.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import lru_cache
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SHARED_OPS = frozenset({"ConvInteger"})  # ops whose CPU kernels read their weights in place
MIN_SHARED_BYTES = 64 * 1024  # smaller initializers are not worth an entry


class SharedWeights:
    """One copy of a model's in-place weights, for every session built from the model (or cut
    from it: the split models keep the initializer names)."""

    def __init__(self, model: Any) -> None:
        import onnxruntime as ort
        from onnx import numpy_helper

        graph = model.graph
        consumers: dict[str, set[str]] = {}
        for node in graph.node:
            for name in node.input:
                consumers.setdefault(name, set()).add(node.op_type)
        self._arrays: dict[str, np.ndarray] = {}  # owns the buffers the OrtValues point into
        self._values: dict[str, Any] = {}
        for tensor in graph.initializer:
            ops = consumers.get(tensor.name, set())
            if not ops or not ops <= SHARED_OPS:
                continue
            array = np.require(numpy_helper.to_array(tensor), requirements="C")  # keeps 0-d as 0-d
            if array.nbytes < MIN_SHARED_BYTES:
                continue
            self._arrays[tensor.name] = array
            self._values[tensor.name] = ort.OrtValue.ortvalue_from_numpy(array)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

    def __len__(self) -> int:
        return len(self._values)

    def add_to(self, options: Any, model: Any) -> int:
        """Give ``options`` the shared weights ``model``'s graph uses; returns how many."""
        names = [t.name for t in model.graph.initializer if t.name in self._values]
        for name in names:
            options.add_initializer(name, self._values[name])
        return len(names)


@lru_cache(maxsize=1)
def _shared_arena() -> bool:
    """Register one CPU arena with onnxruntime's environment (once per process: the environment
    is process-wide), growing by what is asked rather than doubling."""
    import onnxruntime as ort

    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": 1}))
    return True


def _options(threads: int) -> Any:
    import onnxruntime as ort

    _shared_arena()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors reach the caller as exceptions; don't also print them
    opts.add_session_config_entry("session.use_env_allocators", "1")
    # a memory pattern (one block per input shape, planned on its first run) costs no less time
    # here and holds more: the same 200-frame vocoder window peaked at 460 MB the second time
    # instead of 180, and a reply's mix of shapes left the arena 25% larger (docs/BENCHMARKS.md)
    opts.enable_mem_pattern = False
    # no spinning after a run: each session has its own intra-op pool, and a pool that spins
    # after its run takes a core from the next session's (encoder, then exact vocoder, then
    # frozen: 2 cores, 4 pools). Measured in-process, quiet: the encoder's run 20 ms instead of
    # 31-33 on a 7-token piece, encoder + exact vocoder within 2% of the whole model instead of
    # 5-8% over it; the whole model alone no slower (docs/BENCHMARKS.md, memory)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def make_session(model: Any, threads: int, weights: SharedWeights | None = None) -> Any:
    """A CPU session for ``model`` (an ``onnx.ModelProto``): ``threads`` intra-op threads, the
    process's one shared arena, the shared weights the graph uses. The serialized bytes are
    dropped once the session exists."""
    import onnxruntime as ort

    opts = _options(threads)
    if weights is not None:
        weights.add_to(opts, model)
    session = ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    # onnxruntime's Python wrapper keeps the serialized model for good, to rebuild the session
    # on a fallback to another provider ("holding the memory indefinitely", its own comment
    # says); a CPU-only session never falls back, and the whole model's bytes are 92 MB
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    return session


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def shrink_model() -> bytes:
    """A one-node Identity model at the lowest IR version its opset allows: ``make_model`` stamps
    the onnx package's newest (14 with onnx 1.23), which an older onnxruntime refuses (1.30:
    "Unsupported model IR version: 14, max supported IR version: 13")."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "shrink", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model.SerializeToString()


@lru_cache(maxsize=1)
def _shrinker() -> tuple[Any, Any, dict[str, np.ndarray]]:
    """A one-node session on the shared arena, and run options that shrink the arena after a
    run: running it hands the arena's unused regions back to the C allocator."""
    import onnxruntime as ort

    session = ort.InferenceSession(shrink_model(), sess_options=_options(1), providers=["CPUExecutionProvider"])
    run_options = ort.RunOptions()
    run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return session, run_options, {"x": np.zeros(1, np.float32)}


def release_freed_memory() -> bool:
    """Hand memory nothing uses back to the system: the shared arena's free regions (to the C
    allocator), then the C allocator's free pages (glibc's ``malloc_trim``). False where the C
    library has no such call (musl, macOS): it then keeps them for reuse.

    Call it when the engine is idle: the next call pays for touching that memory again (about
    4% of a call's CPU, measured)."""
    session, run_options, feeds = _shrinker()
    session.run(None, feeds, run_options)
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
