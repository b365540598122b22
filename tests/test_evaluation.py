"""evaluation.py: a model on a validation set, its arguments checked before any translation."""
import pytest

from minitransformer.config import SearchConfig

from conftest import tiny_model


def test_evaluate_refuses_unpaired_sources_before_translating(task, monkeypatch):
    from minitransformer.run import translation
    tok, _, (src, ref) = task
    model = tiny_model(tok)
    monkeypatch.setattr(translation, "translate_lines", lambda *a, **k: pytest.fail("translated before the check"))
    with pytest.raises(ValueError, match=f"evaluate: {len(src)} sources but 1 references"):
        translation.evaluate(model, tok, src, ref[:1])
    with pytest.raises(TypeError, match="evaluate: sources and references must be lists of sentences"):
        translation.evaluate(model, tok, src[:1], ref[0])
    with pytest.raises(ValueError, match="evaluate: BLEU scores one translation per sentence: nbest must be 1"):
        translation.evaluate(model, tok, src, ref, search=SearchConfig(beam_size=2, nbest=2))
    with pytest.raises(TypeError, match="evaluate: search must be a SearchConfig, got dict"):
        translation.evaluate(model, tok, src, ref, search={"beam_size": 2})
    with pytest.raises(ValueError, match="evaluate: no sentences to evaluate on"):
        translation.evaluate(model, tok, [], [])
    with pytest.raises(ValueError, match="validation_loss: the batches hold no target token"):
        translation.validation_loss(model, [])
