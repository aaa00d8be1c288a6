"""Several segments in ONE forward pass of hexgrad's ``KModel``: padded, masked, cut apart.

``KModel.forward_with_tokens`` takes one sequence. Run on a padded batch as it stands, it
would give every item but the longest different audio: the duration LSTM runs unpacked (its
backward direction would start in the padding), the alignment is built for one item, every
``InstanceNorm1d`` of the prosody and decoder blocks takes its statistics over the whole
padded time axis, convolutions near an item's end would read the padding, and the harmonic
source (random phases and noise, a reflect-padded STFT) and the inverse STFT would run over
the padding too. So ``forward_batch`` re-runs KModel's forward with the model's own
submodules and changes exactly those places:

- text: the pad is masked in BERT (its attention mask) and in the text encoders (as KModel
  already does); the duration LSTM and F0/N's shared LSTM run packed to each item's length;
- alignment: one matrix per item (its predicted frames, zero columns after them);
- while the F0/N blocks and the decoder run, every ``Conv1d``/``ConvTranspose1d`` sees zeros
  after each item's end (what a lone run's zero padding gives it) and every ``InstanceNorm1d``
  takes its statistics over each item's own frames (``_Masking``);
- the harmonic source and both STFTs run per item over its own length (cheap: no weights);
- random draws (the source's initial phases and noise) are seeded per item, so a segment
  gives the same audio alone (``seeded``) or in any batch.

Each item's audio is then cut to its own length: 600 samples per predicted frame. Every
function here blocks; torch is imported by the caller (``gateway.engines.kokoro``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import EngineError
from ..kokoro.parts import Rendered, Segment

SEED = 0  # every segment's source noise starts here: the same text sounds the same each time


@dataclass(frozen=True, slots=True)
class Item:
    """One segment: token ids (without KModel's two pads), its style row, its speed."""

    ids: tuple[int, ...]
    style: Any  # torch (1, 256): the voice pack's row for this length
    speed: float


def seeded(seed: int = SEED) -> None:
    """Seed the draws the harmonic source makes (CPU and every CUDA device)."""
    torch.manual_seed(seed)


class _Masking:
    """While entered: the convolutions and instance norms under ``roots`` see each item only
    up to its own length. Lengths scale with the resolution: ``frames[i] * (T // F)`` samples
    of ``T``, less the padding the longest item has (the vocoder's +1 frame included)."""

    def __init__(self, roots: Sequence[nn.Module], frames: torch.Tensor) -> None:
        self.roots, self.frames = roots, frames
        self.longest = int(frames.max())
        self.handles: list[Any] = []
        self.norms: list[nn.InstanceNorm1d] = []
        self._masks: dict[int, torch.Tensor] = {}

    def mask(self, size: int) -> torch.Tensor:
        """``(B, 1, size)``: True where each item's own samples are."""
        if size not in self._masks:
            valid = size - (self.longest - self.frames) * (size // self.longest)
            steps = torch.arange(size, device=self.frames.device)
            self._masks[size] = (steps[None, :] < valid[:, None])[:, None, :]
        return self._masks[size]

    def _zero_tail(self, _module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        return (x.masked_fill(~self.mask(x.shape[-1]), 0.0), *args[1:])

    def _norm(self, norm: nn.InstanceNorm1d) -> Any:
        def forward(x: torch.Tensor) -> torch.Tensor:
            mask = self.mask(x.shape[-1])
            count = mask.sum(-1, keepdim=True)
            mean = x.masked_fill(~mask, 0.0).sum(-1, keepdim=True) / count
            centred = (x - mean).masked_fill(~mask, 0.0)
            var = (centred * centred).sum(-1, keepdim=True) / count
            y = (x - mean) * torch.rsqrt(var + norm.eps)
            if norm.affine:
                y = y * norm.weight[None, :, None] + norm.bias[None, :, None]
            return y

        return forward

    def __enter__(self) -> _Masking:
        if int(self.frames.min()) == self.longest:
            return self  # no padding (one item, or equal lengths): nothing to mask
        for root in self.roots:
            for module in root.modules():
                if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
                    self.handles.append(module.register_forward_pre_hook(self._zero_tail))
                elif isinstance(module, nn.InstanceNorm1d):
                    module.forward = self._norm(module)  # type: ignore[method-assign]
                    self.norms.append(module)
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()
        for norm in self.norms:
            del norm.forward  # back to the class's own
        self.handles, self.norms = [], []


def _packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``lstm`` over each item's own steps of ``x`` (B, T, C); zeros after them."""
    if int(lengths.min()) == x.shape[1]:
        whole: torch.Tensor = lstm(x)[0]  # no padding: KModel's own call (packing would only slow it down)
        return whole
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    lstm.flatten_parameters()
    out, _ = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out


def _alignment(durations: torch.Tensor, frames: int) -> torch.Tensor:
    """(B, T, frames): token t owns the frames from the sum of the durations before it."""
    ends = durations.cumsum(1)
    steps = torch.arange(frames, device=durations.device)[None, None, :]
    return ((steps >= (ends - durations)[:, :, None]) & (steps < ends[:, :, None])).float()


def _durations(
    model: Any, ids: torch.Tensor, lengths: torch.Tensor, styles: torch.Tensor, speeds: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """KModel's text side: (pred_dur (B, T), zero on the pad; d; the text mask)."""
    text_mask = torch.arange(ids.shape[1], device=ids.device)[None, :] >= lengths[:, None]
    bert = model.bert(ids, attention_mask=(~text_mask).int())
    d_en = model.bert_encoder(bert).transpose(-1, -2)
    d = model.predictor.text_encoder(d_en, styles[:, 128:], lengths, text_mask)
    x = _packed(model.predictor.lstm, d, lengths)
    duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(-1) / speeds[:, None]
    pred_dur = torch.round(duration).clamp(min=1).long().masked_fill(text_mask, 0)
    return pred_dur, d, text_mask


def _f0n(predictor: Any, en: torch.Tensor, s: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ProsodyPredictor.F0Ntrain`` with its LSTM packed (the blocks run masked)."""
    x = _packed(predictor.shared, en.transpose(-1, -2), frames).transpose(-1, -2)
    f0, n = x, x
    for block in predictor.F0:
        f0 = block(f0, s)
    for block in predictor.N:
        n = block(n, s)
    return predictor.F0_proj(f0).squeeze(1), predictor.N_proj(n).squeeze(1)


def _harmonics(gen: Any, f0_curve: torch.Tensor, frames: Sequence[int]) -> torch.Tensor:
    """The harmonic source's spectrum per item, over its own length, seeded; zero-padded."""
    parts = []
    for i, f in enumerate(frames):
        f0 = gen.f0_upsamp(f0_curve[i : i + 1, None, : 2 * f]).transpose(1, 2)
        seeded()
        source, _, _ = gen.m_source(f0)
        spec, phase = gen.stft.transform(source.transpose(1, 2).squeeze(1))
        parts.append(torch.cat([spec, phase], dim=1)[0].transpose(0, 1))
    return nn.utils.rnn.pad_sequence(parts, batch_first=True).transpose(1, 2)


def _generator(
    gen: Any, x: torch.Tensor, s: torch.Tensor, f0_curve: torch.Tensor, frames: Sequence[int]
) -> list[torch.Tensor]:
    """``Generator.forward``, its source and inverse STFT per item: each item's audio."""
    har = _harmonics(gen, f0_curve, frames)
    for i in range(gen.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        x_source = gen.noise_res[i](gen.noise_convs[i](har), s)
        x = gen.ups[i](x)
        if i == gen.num_upsamples - 1:
            x = gen.reflection_pad(x)
        x = x + x_source
        xs = gen.resblocks[i * gen.num_kernels](x, s)
        for j in range(1, gen.num_kernels):
            xs += gen.resblocks[i * gen.num_kernels + j](x, s)
        x = xs / gen.num_kernels
    x = gen.conv_post(F.leaky_relu(x))
    bins, ratio = gen.post_n_fft // 2 + 1, (x.shape[-1] - 1) // max(frames)
    audio = []
    for i, f in enumerate(frames):
        own = x[i : i + 1, :, : ratio * f + 1]
        audio.append(gen.stft.inverse(torch.exp(own[:, :bins]), torch.sin(own[:, bins:])).reshape(-1))
    return audio


def _decode(
    decoder: Any, asr: torch.Tensor, f0_curve: torch.Tensor, n: torch.Tensor, s: torch.Tensor, frames: Sequence[int]
) -> list[torch.Tensor]:
    """``Decoder.forward`` (its blocks run masked), then the per-item generator."""
    f0 = decoder.F0_conv(f0_curve.unsqueeze(1))
    n = decoder.N_conv(n.unsqueeze(1))
    x = decoder.encode(torch.cat([asr, f0, n], dim=1), s)
    asr_res = decoder.asr_res(asr)
    res = True
    for block in decoder.decode:
        if res:
            x = torch.cat([x, asr_res, f0, n], dim=1)
        x = block(x, s)
        if block.upsample_type != "none":
            res = False
    return _generator(decoder.generator, x, s, f0_curve, frames)


@torch.inference_mode()
def forward_batch(model: Any, items: Sequence[Item]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each item's float32 audio (24 kHz, its own length) and ``pred_dur`` (frames per token,
    KModel's two pads included), from one forward pass over all of them."""
    device = model.device
    rows = [torch.tensor([0, *item.ids, 0], dtype=torch.long) for item in items]
    lengths = torch.tensor([len(r) for r in rows], device=device)
    ids = nn.utils.rnn.pad_sequence(rows, batch_first=True).to(device)
    styles = torch.cat([item.style.reshape(1, -1) for item in items]).to(device)
    speeds = torch.tensor([float(item.speed) for item in items], device=device)
    pred_dur, d, text_mask = _durations(model, ids, lengths, styles, speeds)
    frames = pred_dur.sum(1)
    counts = [int(f) for f in frames.tolist()]
    alignment = _alignment(pred_dur, max(counts))
    en = d.transpose(-1, -2) @ alignment
    t_en = model.text_encoder(ids, lengths, text_mask)
    asr = t_en @ alignment
    with _Masking((model.predictor.F0, model.predictor.N, model.decoder), frames):
        f0_curve, n = _f0n(model.predictor, en, styles[:, 128:], frames)
        audio = _decode(model.decoder, asr, f0_curve, n, styles[:, :128], counts)
    return [
        (a.float().cpu().numpy(), pred_dur[i, : len(rows[i])].cpu().numpy().astype(np.int64))
        for i, a in enumerate(audio)
    ]


def render_batch(kokoro: Any, segments: Sequence[Segment]) -> list[Rendered | EngineError]:
    """What ``TorchKokoro.render`` gives for each segment, from one forward pass; a segment
    whose audio is not finite gets its own ``EngineError`` (the others are unaffected)."""
    results: list[Rendered | EngineError] = [
        Rendered.trimmed(np.zeros(0, np.float32), np.zeros(0, np.int64)) for _ in segments
    ]
    items = {
        i: Item(
            tuple(kokoro.vocab[p] for p in s.phonemes if p in kokoro.vocab),
            kokoro.style(s.voice)[len(s.phonemes) - 1],
            s.speed,
        )
        for i, s in enumerate(segments)
        if s.phonemes
    }
    if not items:
        return results
    for i, (audio, durations) in zip(items, forward_batch(kokoro.model, list(items.values()))):
        if np.isfinite(audio).all():
            results[i] = Rendered.trimmed(audio, durations)
        else:
            results[i] = EngineError("the kokoro model produced non-finite audio", code="engine_error")
    return results
