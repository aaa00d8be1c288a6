"""Every Kokoro language on the real embedded model, its G2P, and blends of voice packs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from gateway.config import Settings
from gateway.core.options import check_voice
from gateway.engines.embedded import EmbeddedEngine
from gateway.errors import BadRequest
from gateway.kokoro import voicecatalog

from .conftest import embedded_engine

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
RATE = 24000

# one voice per language letter, with a sentence in that language
GROUPS = [
    ("af_heart", "The weather will be sunny tomorrow morning."),
    ("bm_george", "The weather will be sunny tomorrow morning."),
    ("ef_dora", "Mañana hará sol por la mañana."),
    ("ff_siwis", "Demain matin, il fera beau."),
    ("hf_alpha", "कल सुबह मौसम अच्छा रहेगा।"),
    ("im_nicola", "Domani mattina ci sarà il sole."),
    ("jf_nezumi", "明日の朝は晴れるでしょう。"),
    ("pm_alex", "Amanhã de manhã vai fazer sol."),
    ("zf_xiaoxiao", "明天早上天气晴朗。"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[EmbeddedEngine]:
    async with embedded_engine(Settings(embedded_vocoder="off")) as eng:
        yield eng


async def render(engine: EmbeddedEngine, text: str, voice: str) -> np.ndarray:
    chunks = [c async for c in engine.synthesize(text, voice=voice, speed=1.0)]
    return np.frombuffer(b"".join(chunks), "<i2").astype(np.float32) / 32768


@pytest.mark.parametrize("voice,text", GROUPS, ids=[v for v, _ in GROUPS])
async def test_every_language_group_speaks(engine: EmbeddedEngine, voice: str, text: str) -> None:
    phonemes = await engine.phonemes(text, voice)
    assert len(phonemes) >= 10, phonemes  # the language's G2P read the sentence
    pcm = await render(engine, text, voice)
    seconds = len(pcm) / RATE
    assert 0.8 < seconds < 6.0, seconds
    n = RATE // 20
    db = 20 * np.log10(np.sqrt(np.mean(pcm[: len(pcm) // n * n].reshape(-1, n) ** 2, axis=1)) + 1e-9)
    assert -30 < db.max() < 0 and (db > db.max() - 20).sum() >= 6  # voiced, neither silent nor clipped


async def test_each_language_has_its_own_g2p(engine: EmbeddedEngine) -> None:
    text = "Hola"
    spanish, american = await engine.phonemes(text, "ef_dora"), await engine.phonemes(text, "af_heart")
    assert spanish != american
    # Mandarin: tone arrows from misaki's zh G2P; Japanese voices read kana with the Japanese G2P
    assert set(await engine.phonemes("你好", "zm_yunxi")) & set("→↗↓↘")
    assert "h" not in await engine.phonemes("你好", "zm_yunxi")  # not the English route


async def test_british_and_american_g2p_differ_where_they_should(engine: EmbeddedEngine) -> None:
    us_tomato, gb_tomato = [await engine.phonemes("tomato", v) for v in ("af_heart", "bf_emma")]
    assert "ˈA" in us_tomato and "ˈɑː" in gb_tomato  # to-MAY-to / to-MAH-to
    us, gb = [await engine.phonemes("schedule", v) for v in ("am_michael", "bm_lewis")]
    assert us.startswith("sk") and gb.startswith("ʃ")  # SKED-jool / SHED-yool
    # and where they should not: a plain word reads the same
    assert await engine.phonemes("big ship", "af_heart") == await engine.phonemes("big ship", "bf_emma")


async def test_a_blend_is_the_weighted_mean_of_its_packs(engine: EmbeddedEngine) -> None:
    packs = engine.model.styles
    equal = engine.model.style(check_voice(engine.capabilities, "af_bella+af_sky"))
    np.testing.assert_allclose(equal, (packs["af_bella"] + packs["af_sky"]) / 2, atol=1e-6)
    weighted_id = check_voice(engine.capabilities, "af_bella(2)+af_sky(1)")
    weighted = engine.model.style(weighted_id)
    np.testing.assert_allclose(weighted, (2 * packs["af_bella"] + packs["af_sky"]) / 3, atol=1e-6)
    assert not np.allclose(weighted, equal)
    # it speaks, and differently from either voice alone
    blend = await render(engine, "Good morning.", "af_bella(2)+af_sky(1)")
    alone = await render(engine, "Good morning.", "af_bella")
    assert len(blend) > RATE // 2 and not np.array_equal(blend[: len(alone)], alone[: len(blend)])


async def test_a_blend_speaks_its_first_voices_language(engine: EmbeddedEngine) -> None:
    british = await engine.phonemes("schedule", "bf_emma+af_heart")
    american = await engine.phonemes("schedule", "af_heart+bf_emma")
    assert british.startswith("ʃ") and american.startswith("sk")


@pytest.mark.parametrize(
    "spec,code,needle",
    [
        ("af_bella+af_nobody", "unknown_voice", "af_heart"),  # lists the valid ids
        ("af_bella+nobody(2)", "unknown_voice", "af_heart"),
        ("af_bella(0)+af_sky", "invalid_option", "weight"),
        ("af_bella(x)+af_sky", "invalid_option", "af_bella(2)+af_sky(1)"),
        ("+".join(["af_sky"] * 9), "invalid_option", "at most"),
    ],
)
async def test_bad_blends_are_refused_with_the_reason(
    engine: EmbeddedEngine, spec: str, code: str, needle: str
) -> None:
    with pytest.raises(BadRequest) as err:
        check_voice(engine.capabilities, spec)
    assert err.value.code == code and needle in err.value.message


async def test_blend_ids_are_canonical() -> None:
    known = {"af_bella", "af_sky"}
    assert voicecatalog.resolve(" af_bella + af_sky ", known) == "af_bella+af_sky"
    assert voicecatalog.resolve("af_bella(2)+af_sky(2)", known) == "af_bella+af_sky"
    assert voicecatalog.resolve("af_bella(3)+af_sky(1)", known) == "af_bella(3)+af_sky(1)"
    assert voicecatalog.resolve("af_bella(1.5)+af_sky+af_bella(0.5)", known) == "af_bella(2)+af_sky(1)"
    assert voicecatalog.language_of("bf_emma(1)+af_sky(3)") == "b"


async def test_mandarin_without_its_dependencies_is_a_clear_error(monkeypatch) -> None:
    import sys

    from gateway.kokoro import g2p

    monkeypatch.setitem(sys.modules, "jieba", None)  # as if the package were not installed
    with pytest.raises(g2p.UnsupportedLanguage, match="jieba"):
        g2p._load_chinese()


async def test_a_language_without_a_g2p_answers_unsupported_language(engine: EmbeddedEngine, monkeypatch) -> None:
    import sys

    phonemizer = engine.model.phonemize
    monkeypatch.setitem(sys.modules, "jieba", None)
    monkeypatch.setattr(phonemizer, "_g2p", {k: v for k, v in phonemizer._g2p.items() if k != "z"})
    with pytest.raises(BadRequest) as err:
        await anext(engine.synthesize("你好。", voice="zf_xiaobei", speed=1.0))
    assert err.value.code == "unsupported_language" and "jieba" in err.value.message
