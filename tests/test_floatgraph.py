"""Float graphs from the shipped int8 model (``gateway.kokoro.floatgraph``) and the provider setting.

The rewrite is checked twice: on a small graph that onnxruntime's own dynamic quantizer makes
here (every pattern the shipped export uses, in a second: outputs equal to the quantized
graph's), and on Kokoro-82M itself (the float graph speaks like the int8 one on the same
phonemes: same durations within a few frames, the same voice). Kokoro's float graph is built
once and kept in the user cache (``~/.cache/kokoro-gateway/float``), as in production.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gateway.config import Settings
from gateway.kokoro import floatgraph
from gateway.kokoro.floatgraph.dequantize import QUANTIZED, dequantize
from gateway.kokoro.floatgraph.runtime import CUDA, ProviderUnavailable, check_provider

from .support.cli import refused_at_start

PHONEMES = "ðə tɹˈAn tə ðə ˈɛɹpˌɔɹt lˈivz fɹʌm ðə sˈɛkənd plˈætfˌɔɹm."
HAS_CUDA = CUDA in ort.get_available_providers()


def small_float_model() -> onnx.ModelProto:
    """Conv (with bias), MatMul, a bias-free Conv, an LSTM and a Gather: the shipped patterns."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="/embed/Gather"),  # [1, T, 8]
        helper.make_node("Transpose", ["emb"], ["x"], perm=[0, 2, 1], name="/t"),  # [1, 8, T]
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1], name="/conv/Conv"),
        helper.make_node("Conv", ["c", "skip.weight"], ["c2"], name="/skip/Conv"),
        helper.make_node("Transpose", ["c2"], ["ct"], perm=[2, 0, 1], name="/t2"),  # [T, 1, 6]
        helper.make_node(
            "LSTM",
            ["ct", "lstm.W", "lstm.R", "lstm.B"],
            ["h"],
            hidden_size=4,
            direction="bidirectional",
            name="/lstm/LSTM",
        ),  # [T, 2, 1, 4]
        helper.make_node("Reshape", ["h", "shape"], ["hr"], name="/r"),  # [T, 8]
        helper.make_node("MatMul", ["hr", "fc.weight"], ["y"], name="/fc/MatMul"),
    ]
    inits = [
        init("table", 10, 8),
        init("conv.weight", 6, 8, 3),
        init("conv.bias", 6),
        init("skip.weight", 6, 6, 1),
        init("lstm.W", 2, 16, 6),
        init("lstm.R", 2, 16, 4),
        init("lstm.B", 2, 32),
        init("fc.weight", 8, 5),
        numpy_helper.from_array(np.array([-1, 8], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantized(model: onnx.ModelProto, tmp: Path, reduce_range: bool = False) -> onnx.ModelProto:
    """``model`` as onnxruntime's dynamic quantization makes it; ``reduce_range``: 7-bit weights,
    as the shipped Kokoro graph's are."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(model, tmp / "float.onnx")
    quantize_dynamic(
        tmp / "float.onnx",
        tmp / "int8.onnx",
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["Conv", "MatMul", "LSTM", "Gather"],
        per_channel=False,
        reduce_range=reduce_range,
    )
    return onnx.load(tmp / "int8.onnx")


def run(model: onnx.ModelProto, ids: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"ids": ids})[0]


def test_dequantize_undoes_onnxruntime_dynamic_quantization(tmp_path: Path) -> None:
    original = small_float_model()
    int8 = quantized(original, tmp_path)
    ops = {n.op_type for n in int8.graph.node}
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "DequantizeLinear"} <= ops
    rewritten = dequantize(int8)
    onnx.checker.check_model(rewritten)
    assert not {n.op_type for n in rewritten.graph.node} & {*QUANTIZED, "DynamicQuantizeLinear"}
    ids = np.array([[1, 4, 2, 9, 0, 3, 3]], np.int64)
    want, got = run(original, ids), run(rewritten, ids)
    # the weights are the int8 ones dequantized: close to the original's, and activations are no
    # longer quantized, so closer to it than the int8 graph itself
    err_float, err_int8 = np.abs(got - want).max(), np.abs(run(int8, ids) - want).max()
    assert err_float < 0.1 * np.abs(want).max() and err_float < err_int8


def test_float_graph_is_cached_by_hash_and_rebuilt_when_damaged(tmp_path: Path) -> None:
    int8 = quantized(small_float_model(), tmp_path).SerializeToString()
    sha = hashlib.sha256(int8).hexdigest()
    built, digest = floatgraph.graph_bytes("fp32", lambda: int8, sha, str(tmp_path / "cache"))
    path = floatgraph.cache_path(tmp_path / "cache", sha, "fp32")
    assert path.read_bytes() == built and hashlib.sha256(built).hexdigest() == digest

    def no_source() -> bytes:
        raise AssertionError("the cached graph should have been used")

    assert floatgraph.graph_bytes("fp32", no_source, sha, str(tmp_path / "cache")) == (built, digest)
    path.write_bytes(built[:100])  # damaged: rebuilt from the source
    assert floatgraph.graph_bytes("fp32", lambda: int8, sha, str(tmp_path / "cache")) == (built, digest)
    assert floatgraph.graph_bytes("int8", lambda: int8, sha) == (int8, sha)
    with pytest.raises(ValueError, match="embedded_precision"):
        floatgraph.graph_bytes("fp8", lambda: int8, sha)


@pytest.mark.slow  # builds float graphs of the real model and runs them beside the int8 one
def test_fp16_graph_keeps_float32_inputs_outputs_and_the_source_path() -> None:
    from gateway.kokoro.onnx_model import load_model_bytes, shipped_sha256

    blob, _ = floatgraph.graph_bytes("fp16", load_model_bytes, shipped_sha256())
    model = onnx.load_from_string(blob)
    types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}
    assert types == {
        "tokens": TensorProto.INT64,
        "style": TensorProto.FLOAT,
        "speed": TensorProto.FLOAT,
        "audio": TensorProto.FLOAT,
    }
    half = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16}
    assert any(name.startswith("decoder.decoder.generator.resblocks") for name in half)
    kept = [n for n in model.graph.node if n.name.startswith(floatgraph.FP32_SCOPES) and n.op_type == "Conv"]
    assert kept and not any(n.input[1] in half for n in kept)
    # it runs (onnxruntime's CPU provider too) and gives finite audio close to the fp32 graph's
    from bench.measure import align, distance
    from gateway.kokoro.onnx_model import KokoroModel
    from gateway.kokoro.parts import load_voice_packs

    packs = load_voice_packs()
    fp32, fp16 = (KokoroModel(2, "espeak", packs, precision=p) for p in ("fp32", "fp16"))
    a, b = (m.infer(m.tokens(PHONEMES), "af_heart", 1.0) for m in (fp32, fp16))
    assert np.isfinite(b.audio).all() and b.durations.tolist() == a.durations.tolist()
    d = distance(a.audio, align(a.audio, b.audio))
    assert d.lsd_db < 2.0 and d.timbre_db < 0.5, d


@pytest.mark.slow  # builds float graphs of the real model and runs them beside the int8 one
def test_fp32_graph_speaks_like_int8_on_the_same_phonemes() -> None:
    """Same voice (average spectra well under the 2.7 dB between two voices), the duration
    predictor's frames within a few of the int8 graph's (its activations are no longer
    quantized), and the split's cut points all present."""
    from bench.measure import align, distance
    from gateway.kokoro.onnx_model import KokoroModel
    from gateway.kokoro.parts import load_voice_packs

    packs = load_voice_packs()
    out = {}
    for precision in ("int8", "fp32"):
        model = KokoroModel(2, "espeak", packs, precision=precision)
        assert model.precision == precision and model.session.get_providers() == ["CPUExecutionProvider"]
        out[precision] = model.infer(model.tokens(PHONEMES), "af_heart", 1.0)
    int8, fp32 = out["int8"], out["fp32"]
    assert int8.durations.size == fp32.durations.size == len(PHONEMES) + 2
    assert np.abs(int8.durations - fp32.durations).sum() <= 4
    d = distance(int8.audio, align(int8.audio, fp32.audio))
    assert d.timbre_db < 1.0 and abs(d.loudness_db) < 1.0, d


def test_cuda_without_onnxruntime_gpu_is_refused_in_one_line(tmp_path: Path) -> None:
    if HAS_CUDA:
        pytest.skip("this onnxruntime has CUDA: the refusal is for machines without it")
    with pytest.raises(ProviderUnavailable, match="onnxruntime-gpu"):
        check_provider("cuda")
    from gateway.engines.embedded import EmbeddedEngine

    with pytest.raises(ValueError, match="embedded_provider=cuda needs onnxruntime-gpu"):
        EmbeddedEngine(Settings(embedded_provider="cuda"))
    line = refused_at_start(tmp_path, "embedded_provider=cuda", "embedded_precision=fp16")
    assert "embedded_provider=cuda needs onnxruntime-gpu" in line and "CPUExecutionProvider" in line


@pytest.mark.slow
async def test_fp32_streams_inside_a_sentence(tmp_path: Path) -> None:
    """The vocoder split cuts the float graph by the same tensor names, and a long segment
    then comes out in several chunks."""
    from gateway.engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(
        Settings(embedded_precision="fp32", embedded_vocoder="frozen", embedded_vocoder_cache=str(tmp_path))
    )
    await engine.start()
    try:
        assert await engine.wait_vocoder(engine.default_voice), engine.vocoder_status
        text = "The train to the airport leaves from the second platform at eight fifteen tonight, so be early."
        chunks = [c async for c in engine.synthesize(text, voice=engine.default_voice, speed=1.0, vocoder="frozen")]
        samples = np.frombuffer(b"".join(chunks), "<i2")
        # two on an engine slower than real time: the first chunk, then the rest (Policy.batch_rest)
        assert len(chunks) >= 2 and samples.size > 3 * 24000 and np.abs(samples).max() > 1000
        assert not any(s.kind in ("scale", "zero_point") for s in engine.vocoder.statistics)  # no int8 left
    finally:
        await engine.aclose()
