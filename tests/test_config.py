"""config.py: TrainingConfig refuses settings that make no sense, naming the field; TransformerConfig and
SearchConfig have upper bounds that say why (memory), so a config from a file cannot ask for more than a machine has."""
import pytest

from minitransformer.config import SearchConfig, TrainingConfig, TransformerConfig


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


@pytest.mark.parametrize("overrides, message", [
    (dict(d_model=16384, n_heads=16), r"the model would hold 20,774,805,504 floats \(vocab_size 37,000, "
                                      r"d_model 16,384, .*over the limit of 2,147,483,648"),
    (dict(d_model=1_000_000, n_heads=8), r"the model would hold [\d,]+ floats"),
    (dict(vocab_size=1_000_000_000), r"the model would hold [\d,]+ floats \(vocab_size 1,000,000,000"),
    (dict(max_len=10 ** 9), r"max_len must be at most 65,536, got 1,000,000,000: attention holds max_len\^2"),
    (dict(n_encoder_layers=200_000), r"n_encoder_layers must be at most 1,024, got 200,000: deeper than"),
    (dict(n_decoder_layers=10 ** 6, d_model=2, n_heads=1, d_ff=1), r"n_decoder_layers must be at most 1,024"),
])
def test_transformer_config_refuses_a_model_no_machine_holds_before_any_array(overrides, message):
    """The upper bounds that say why: a config from a file cannot ask for more memory than a machine has."""
    with pytest.raises(ValueError, match="TransformerConfig: " + message):
        TransformerConfig(**overrides)


def test_the_bounds_leave_room_for_every_preset_and_sit_at_the_limit():
    from minitransformer.config import MAX_FLOATS, MAX_LAYERS, MAX_LEN, count_parameters
    for preset in ("base", "big", "small", "tiny"):
        getattr(TransformerConfig, preset)(vocab_size=1_114_112 if preset != "big" else 37000)
    TransformerConfig.tiny(vocab_size=300, max_len=MAX_LEN, n_layers=MAX_LAYERS)
    # the budget counts the parameters and the two sinusoid tables: one float under it passes, one over fails
    config = TransformerConfig.tiny(vocab_size=300, max_len=64)
    used = count_parameters(config) + 2 * 64 * 128
    fits = TransformerConfig.tiny(vocab_size=300 + (MAX_FLOATS - used) // 128, max_len=64)
    assert count_parameters(fits) + 2 * 64 * 128 <= MAX_FLOATS
    with pytest.raises(ValueError, match="over the limit"):
        TransformerConfig.tiny(vocab_size=fits.vocab_size + 1, max_len=64)


def test_search_config_bounds_the_beam_with_its_reason():
    assert SearchConfig(beam_size=256).beam_size == 256
    with pytest.raises(ValueError, match=r"SearchConfig: beam_size must be at most 256, got 100,000: beam search "
                                         r"scores beam_size x vocabulary candidates") as e:
        SearchConfig(beam_size=100_000)
    assert e.value.setting == "beam_size" and e.value.renamed({"beam_size": "--beam"}).startswith("--beam must")
