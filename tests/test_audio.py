"""Audio encoding: the MP3 frame parser and aligner, and the streaming encoders.

Frames come from real encoders (lameenc, PyAV's libmp3lame); everything is decoded back
with PyAV (ffmpeg) and checked on samples, not on our own bookkeeping.
"""

from __future__ import annotations

import functools
import io
import struct

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audio import (
    CONTENT_TYPES,
    FORMATS,
    FrameAligner,
    Mp3FormatError,
    count_frames,
    encode_all,
    g711,
    is_whole_frames,
    iter_frames,
    make_encoder,
    parse_header,
    split_frames,
)
from gateway.audio.decode import decode_audio, decode_mp3
from gateway.audio.mp3 import id3v2_size, info_tag, mp3_bitrates

SR = 24000
LAME_DELAY = 1105  # samples LAME's stream starts late by (encoder 576 + decoder 529)
MPEG2_L3_KBPS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)


def tone(n: int, *, rate: int = SR, freq: float = 300.0, start: int = 0) -> np.ndarray:
    t = (np.arange(n) + start) / rate
    return (np.sin(2 * np.pi * freq * t) * 12000).astype("<i2")


def lame_stream(rate: int, kbps: int, seconds: float = 0.5) -> bytes:
    return encode_all("mp3", tone(int(rate * seconds), rate=rate).tobytes(), sample_rate=rate, bitrate=kbps)


def pyav_packets(rate: int, kbps: int, seconds: float = 0.5) -> list[bytes]:
    """PyAV's libmp3lame yields exactly one frame per packet."""
    ctx = av.CodecContext.create("libmp3lame", "w")
    ctx.sample_rate, ctx.layout, ctx.format, ctx.bit_rate = rate, "mono", "s16", kbps * 1000
    frame = av.AudioFrame.from_ndarray(tone(int(rate * seconds), rate=rate).reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate, frame.pts = rate, 0
    return [bytes(p) for p in [*ctx.encode(frame), *ctx.encode(None)]]


@functools.cache
def muxed_mp3() -> bytes:
    """ffmpeg's MP3 muxer output: an ID3v2 tag, an Info frame, then the frames."""
    sink = io.BytesIO()
    with av.open(sink, "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=SR, layout="mono")
        stream.bit_rate = 64000
        frame = av.AudioFrame.from_ndarray(tone(SR // 2).reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts = SR, 0
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return sink.getvalue()


@functools.cache
def stream_64k() -> bytes:
    return lame_stream(SR, 64, seconds=1.0)


# --- the parser --------------------------------------------------------------------------


@pytest.mark.parametrize("kbps", MPEG2_L3_KBPS)
def test_parser_reads_every_lameenc_frame_at_24k(kbps: int) -> None:
    data = lame_stream(SR, kbps)
    frames = list(iter_frames(data))
    assert sum(h.length for _, h in frames) == len(data)
    for _, h in frames:
        assert (h.version, h.layer, h.sample_rate, h.channels) == ("2", 3, SR, 1)
        assert h.bitrate_kbps == kbps  # LAME would silently clamp or resample if we let it
        assert h.samples == 576 and not h.padding  # 72 * kbps / 24 is always whole bytes
        assert h.length == 3 * kbps


@pytest.mark.parametrize(
    ("rate", "kbps", "version", "samples"),
    [
        (22050, 32, "2", 576),
        (22050, 64, "2", 576),
        (44100, 64, "1", 1152),
        (44100, 128, "1", 1152),
        (11025, 16, "2.5", 576),
    ],
)
def test_parser_handles_padded_frames(rate: int, kbps: int, version: str, samples: int) -> None:
    data = lame_stream(rate, kbps, seconds=1.0)
    headers = [h for _, h in iter_frames(data)]
    assert sum(h.length for h in headers) == len(data)
    assert {h.version for h in headers} == {version} and {h.samples for h in headers} == {samples}
    padded = [h for h in headers if h.padding]
    assert padded and len(padded) < len(headers)  # 44.1 kHz family: some frames are 1 longer
    assert {h.length for h in padded} == {h.length + 1 for h in headers if not h.padding}


@pytest.mark.parametrize(
    ("rate", "kbps"), [(24000, 32), (24000, 64), (24000, 160), (22050, 64), (44100, 128), (48000, 96)]
)
def test_parser_matches_pyav_packets(rate: int, kbps: int) -> None:
    packets = pyav_packets(rate, kbps)
    assert len(packets) > 5
    for packet in packets:
        header = parse_header(packet)
        assert header is not None and header.length == len(packet)
        assert (header.sample_rate, header.bitrate_kbps) == (rate, kbps)
    assert count_frames(b"".join(packets)) == len(packets)


def test_id3_tag_and_info_frame_from_a_muxer() -> None:
    data = muxed_mp3()
    tag = id3v2_size(data)
    assert data[:3] == b"ID3" and tag and tag > 10
    frames = list(iter_frames(data))  # skips the tag
    assert frames[0][0] == tag and info_tag(data[tag:]) == "Info"
    assert not is_whole_frames(data) and is_whole_frames(data[tag:])


def test_lameenc_writes_no_tag_and_no_info_frame() -> None:
    data = stream_64k()
    assert id3v2_size(data) == 0 and info_tag(data) is None
    assert all(info_tag(data[pos:]) is None for pos, _ in iter_frames(data))


@pytest.mark.parametrize(
    "word",
    [
        b"\x00\x00\x00\x00",
        b"\xff\xeb\x84\xc4",  # reserved version
        b"\xff\xf1\x84\xc4",  # reserved layer
        b"\xff\xf3\xf4\xc4",  # bitrate index 15
        b"\xff\xf3\x8c\xc4",  # reserved sample rate
        b"\xff\xf3\x04\xc4",  # free format
        b"\xff\xf3\x84\xc6",  # reserved emphasis
        b"\xff\xf3\x84",
    ],
)  # too short
def test_parse_header_rejects(word: bytes) -> None:
    assert parse_header(word) is None
    assert parse_header(b"\xff\xf3\x84\xc4") is not None  # the valid one these are cut from


def test_is_whole_frames_rejects_truncated_and_offset_data() -> None:
    data = stream_64k()
    assert is_whole_frames(data) and is_whole_frames(b"")
    assert is_whole_frames(data[192:])  # a frame boundary (64 kbps at 24 kHz: 192 bytes)
    for bad in (data[:-1], data[:-191], data[1:], data[100:], data + b"\x00", data[:192] + data[200:], b"junk" + data):
        assert not is_whole_frames(bad)
    with pytest.raises(Mp3FormatError):
        count_frames(data[:-1])
    with pytest.raises(ValueError):  # Mp3FormatError is a ValueError
        list(iter_frames(data[5:]))


def test_split_frames_groups_whole_frames() -> None:
    data = stream_64k()
    total = count_frames(data)
    groups = split_frames(data, 8)
    assert b"".join(groups) == data and len(groups) == -(-total // 8)
    assert all(is_whole_frames(g) for g in groups)
    sizes = [count_frames(g) for g in groups]
    assert max(sizes) <= 8 and max(sizes) - min(sizes) <= 1  # spread evenly, no lone frame
    frames9 = b"".join(split_frames(data, 1)[:9])
    assert [count_frames(g) for g in split_frames(frames9, 8)] == [5, 4]
    with pytest.raises(ValueError):
        split_frames(data, 0)
    with pytest.raises(Mp3FormatError):
        split_frames(data[:-3], 4)


# --- the aligner -------------------------------------------------------------------------


def feed_in_pieces(aligner: FrameAligner, data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(c % (len(data) + 1) for c in cuts)), len(data)]
    outs = []
    for a, b in zip(bounds, bounds[1:]):
        outs.append(aligner.feed(data[a:b]))
        nxt = parse_header(data, b - aligner.pending) if aligner.pending >= 4 else None
        assert nxt is None or aligner.pending < nxt.length  # no whole frame held back
    return outs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=40))
def test_aligner_returns_exactly_the_frames_whatever_the_cuts(cuts: list[int]) -> None:
    data = stream_64k()
    aligner = FrameAligner()
    outs = feed_in_pieces(aligner, data, cuts)
    assert aligner.flush() == b""
    assert b"".join(outs) == data
    assert all(is_whole_frames(o) for o in outs)
    assert aligner.frames == count_frames(data)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=20))
def test_aligner_drops_a_leading_id3_tag_cut_anywhere(cuts: list[int]) -> None:
    data = muxed_mp3()
    outs = feed_in_pieces(FrameAligner(), data, cuts)
    assert b"".join(outs) == data[id3v2_size(data) :]
    assert all(is_whole_frames(o) for o in outs)


def test_aligner_refuses_junk_and_reports_a_partial_tail() -> None:
    data = stream_64k()
    aligner = FrameAligner()
    assert aligner.feed(data[:300]) == data[:192] and aligner.pending == 108
    assert aligner.flush() == data[192:300]
    with pytest.raises(Mp3FormatError):
        FrameAligner().feed(b"\x00" * 8 + data)


# --- the encoders ------------------------------------------------------------------------

# the demuxer each content type names (PCM: raw s16le, nothing to demux)
DEMUXER_OF = {
    "audio/mpeg": "mp3",
    "audio/wav": "wav",
    "audio/webm;codecs=opus": "webm",
    "audio/pcm": None,
    "audio/PCMU": "ulaw",
    "audio/PCMA": "alaw",
}


def test_formats_and_content_types() -> None:
    """Each format's encoder produces what its content type says: read back with the demuxer
    that type names, the bytes hold the tone that went in (PCM: the very samples)."""
    pcm = tone(SR // 5).tobytes()
    for fmt in FORMATS:
        encoder = make_encoder(fmt)
        assert (encoder.format, encoder.content_type, encoder.sample_rate) == (fmt, CONTENT_TYPES[fmt], SR)
        data = encoder.encode(pcm) + encoder.flush()
        demuxer = DEMUXER_OF[encoder.content_type]  # a content type no player can read fails here
        if demuxer is None:
            assert data == pcm
            continue
        if demuxer in g711.LAWS:  # raw G.711: a byte a sample, within the law's step of the input
            back = np.frombuffer(g711.decode(demuxer, data), "<i2").astype(float)
            assert len(data) == len(pcm) // 2 and np.abs(back - tone(SR // 5)).max() < 1100
            continue
        with av.open(io.BytesIO(data), format=demuxer) as box:
            frames = list(box.decode(audio=0))
        seconds = sum(f.samples for f in frames) / frames[0].sample_rate
        assert 0.2 <= seconds < 0.2 + 0.1, (fmt, seconds)  # the tone, plus the codec's padding
    with pytest.raises(ValueError, match="mp3, pcm, wav, opus, ulaw, alaw"):
        make_encoder("flac")


def encode_in_pieces(fmt: str, pcm: bytes, sizes: list[int]) -> list[bytes]:
    """What one encoder returns for ``pcm`` fed in pieces of ``sizes`` bytes, then its flush."""
    encoder = make_encoder(fmt)
    starts = np.cumsum([0, *sizes])
    return [encoder.encode(pcm[a:b]) for a, b in zip(starts[:-1], starts[1:])] + [encoder.flush()]


@pytest.mark.parametrize("kbps", [0, 7, 65, 192, 320])
def test_mp3_refuses_bitrates_mpeg2_cannot_carry(kbps: int) -> None:
    with pytest.raises(ValueError, match="bitrate"):
        make_encoder("mp3", bitrate=kbps)
    assert mp3_bitrates(SR) == MPEG2_L3_KBPS


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=30))
def test_mp3_encode_returns_whole_frames_for_any_chunking(sizes: list[int]) -> None:
    pcm = tone(sum(sizes) // 2 + 1).tobytes()[: sum(sizes)]  # odd byte counts included
    outs = encode_in_pieces("mp3", pcm, sizes)
    assert all(is_whole_frames(o) for o in outs)
    if len(pcm) < 2:
        assert outs == [b""] * len(outs)  # no audio, no frames (and no error)
        return
    decoded = decode_mp3(b"".join(outs))
    assert 0 <= len(decoded) - len(pcm) // 2 - LAME_DELAY < 2 * 576


def test_mp3_first_frame_comes_out_as_soon_as_lame_completes_it() -> None:
    """Lag before the first payload: this adds straight to time to first audio."""
    pcm = tone(SR).tobytes()
    encoder = make_encoder("mp3")
    fed = next(n + 48 for n in range(0, SR, 48) if encoder.encode(pcm[n * 2 : (n + 48) * 2]))
    # LAME encodes its first frame once 816 samples are in; the bit reservoir can keep that
    # frame's last bytes open for a frame or two more (measured: 1392 here)
    assert fed <= 816 + 2 * 576


def sentences() -> list[np.ndarray]:
    """A continuous tone cut into three "sentences" of uneven, non-frame lengths."""
    lengths = [SR // 2 + 123, SR * 2 // 5 + 77, SR * 3 // 5]
    return np.split(tone(sum(lengths)), np.cumsum(lengths)[:-1])


def longest_silence(x: np.ndarray, window: int = 48) -> int:
    n = len(x) // window
    quiet = np.sqrt((x[: n * window].reshape(n, window) ** 2).mean(axis=1)) < 0.05
    best = run = 0
    for q in quiet:
        run = run + 1 if q else 0
        best = max(best, run)
    return best * window


def test_one_encoder_per_utterance_joins_sentences_without_gaps() -> None:
    parts = sentences()
    total = sum(len(p) for p in parts)
    encoder = make_encoder("mp3")
    one = b"".join(encoder.encode(p.tobytes()) for p in parts) + encoder.flush()
    decoded = decode_mp3(one)
    assert 0 <= len(decoded) - total - LAME_DELAY < 2 * 576
    speech = decoded[LAME_DELAY : LAME_DELAY + total]
    assert longest_silence(speech) == 0
    reference = np.concatenate(parts).astype(np.float32) / 32768
    assert np.corrcoef(speech, reference)[0, 1] > 0.99  # sample-aligned: nothing lost

    fresh = b"".join(encode_all("mp3", p.tobytes()) for p in parts)
    decoded_fresh = decode_mp3(fresh)
    hole = longest_silence(decoded_fresh[LAME_DELAY : LAME_DELAY + total])
    assert hole >= 0.045 * SR  # each join: the next encoder's delay plus the last one's padding
    assert len(decoded_fresh) - len(decoded) >= 2 * LAME_DELAY


def test_flush_without_audio_is_a_valid_empty_stream() -> None:
    assert make_encoder("mp3").flush() == b"" and make_encoder("pcm").flush() == b""
    assert decode_audio(make_encoder("wav").flush(), "wav").samples.size == 0
    init = make_encoder("opus").flush()  # the WebM init segment alone: headers, no clusters
    assert init[:4] == bytes.fromhex("1a45dfa3") and bytes.fromhex("1f43b675") not in init


def test_flush_ends_the_utterance() -> None:
    for fmt in FORMATS:
        encoder = make_encoder(fmt)
        encoder.encode(tone(1000).tobytes())
        encoder.flush()
        assert encoder.flush() == b""
        with pytest.raises(RuntimeError, match="one encoder per utterance"):
            encoder.encode(b"\x00\x00")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=999), max_size=20))
def test_pcm_is_passthrough_cut_between_samples(sizes: list[int]) -> None:
    pcm = tone(sum(sizes) // 2 + 1).tobytes()[: sum(sizes)]
    outs = encode_in_pieces("pcm", pcm, sizes)
    assert all(len(o) % 2 == 0 for o in outs)
    assert b"".join(outs) == pcm[: len(pcm) & ~1]


def stream(fmt: str, pcm: bytes, chunk: int = 1999) -> list[bytes]:
    encoder = make_encoder(fmt)
    return [encoder.encode(pcm[i : i + chunk]) for i in range(0, len(pcm), chunk)] + [encoder.flush()]


def test_wav_streams_with_unknown_size_and_batches_with_the_real_one() -> None:
    samples = tone(SR * 7 // 10)
    pcm = samples.tobytes()
    streamed = b"".join(stream("wav", pcm))
    assert streamed[:4] == b"RIFF" and streamed[40:44] == b"\xff\xff\xff\xff"
    assert len(streamed) == 44 + len(pcm)
    batch = encode_all("wav", pcm)
    assert struct.unpack("<I", batch[4:8])[0] == 36 + len(pcm)
    assert struct.unpack("<I", batch[40:44])[0] == len(pcm) and batch[44:] == pcm
    for data in (streamed, batch):
        decoded = decode_audio(data, "wav")
        assert decoded.sample_rate == SR and len(decoded.samples) == len(samples)
        assert np.abs(decoded.samples * 32768 - samples).max() < 1


def test_opus_webm_streams_incrementally_and_decodes_to_the_input_length() -> None:
    samples = tone(SR * 13 // 10)
    outs = stream("opus", samples.tobytes(), chunk=4800)  # 100 ms of PCM a call
    assert outs[0][:4] == bytes.fromhex("1a45dfa3")  # the WebM (EBML) header comes first
    assert all(outs[:-1])  # every 100 ms in gives bytes out: nothing waits for the end
    decoded = decode_audio(b"".join(outs), "opus")
    assert decoded.sample_rate == 48000
    assert decoded.duration_s == pytest.approx(len(samples) / SR, abs=0.001)
    rms_in = np.sqrt(np.mean((samples / 32768) ** 2))
    assert np.sqrt(np.mean(decoded.samples**2)) == pytest.approx(rms_in, rel=0.1)
    batch = decode_audio(encode_all("opus", samples.tobytes()), "opus")
    assert batch.duration_s == pytest.approx(len(samples) / SR, abs=0.001)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "opus", "mp3"])
def test_round_trip_duration(fmt: str) -> None:
    parts = sentences()
    total = sum(len(p) for p in parts)
    encoder = make_encoder(fmt)
    data = b"".join(encoder.encode(p.tobytes()) for p in parts) + encoder.flush()
    decoded = decode_audio(data, fmt)
    expected = (total + (LAME_DELAY if fmt == "mp3" else 0)) / SR
    slack = 2 * 576 / SR if fmt == "mp3" else 0.001
    assert expected - 0.001 <= decoded.duration_s <= expected + slack
