"""config.py: TrainingConfig refuses settings that make no sense, naming the field."""
import pytest

from minitransformer.config import SearchConfig, TrainingConfig


def test_config_errors():
    with pytest.raises(ValueError, match="steps or epochs"):
        TrainingConfig()
    with pytest.raises(ValueError, match="accum"):
        TrainingConfig(steps=1, accum=0)


@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("steps", -3), ("epochs", 0.0), ("epochs", float("inf")), ("epochs", float("nan")),
    ("lr_scale", -1.0), ("lr_scale", 0.0), ("clip_norm", 0.0), ("clip_norm", float("nan")), ("clip_norm", -1.0),
    ("eval_sentences", -1), ("eval_sentences", 0), ("keep", 0), ("max_tokens", 0), ("accum", 0), ("warmup_steps", 0),
    ("search", 4),
])
def test_training_config_refuses_values_that_make_no_sense(field, value):
    with pytest.raises(ValueError, match=f"TrainingConfig: {field} must"):
        TrainingConfig(**{"steps": 5, field: value})


def test_training_config_search_settings_fail_when_made_not_at_the_first_evaluation():
    """The evaluation's search settings are a SearchConfig, checked when it is made; BLEU takes one
    translation per sentence, so a TrainingConfig refuses nbest > 1 at once."""
    assert TrainingConfig(steps=1).search == SearchConfig(beam_size=1)      # greedy by default
    with pytest.raises(ValueError, match="SearchConfig: alpha must be a finite number in") as e:
        TrainingConfig(steps=1, search=SearchConfig(alpha=20))
    assert e.value.setting == "alpha"
    with pytest.raises(ValueError, match="TrainingConfig: search.nbest must be 1"):
        TrainingConfig(steps=1, search=SearchConfig(beam_size=4, nbest=2))
