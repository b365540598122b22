"""config.py: TrainingConfig refuses settings that make no sense, naming the field; TransformerConfig and
SearchConfig have upper bounds that say why (memory), so a config from a file cannot ask for more than a machine has."""
import dataclasses
import json

import numpy as np
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


# ---------------------------------------------------------------- one rule for every field's type
NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize("cls, field, value, message", [
    # floats, bools, text and None where an integer goes
    (TransformerConfig, "d_model", 16.0, "d_model must be an integer of at least 1, got 16.0"),
    (TransformerConfig, "n_heads", True, "n_heads must be an integer of at least 1, got True"),
    (TransformerConfig, "vocab_size", "300", "vocab_size must be an integer"),
    (TransformerConfig, "max_len", np.float64(64.0), "max_len must be an integer"),
    (TrainingConfig, "steps", 1.5, "steps must be an integer of at least 1, got 1.5"),
    (TrainingConfig, "seed", False, "seed must be an integer of at least 0, got False"),
    (TrainingConfig, "keep", None, "keep must be an integer"),
    (SearchConfig, "beam_size", 4.0, "beam_size must be an integer"),
    (SearchConfig, "max_len_b", np.bool_(True), "max_len_b must be an integer"),
    # integers past what float64 and JSON keep exactly
    (TrainingConfig, "warmup_steps", 10 ** 400,
     r"warmup_steps must be at most 2\*\*53 - 1 = 9,007,199,254,740,991 "
     r"in absolute value .*, got an integer of 1,329 bits"),
    (TrainingConfig, "seed", 2 ** 53, "seed must be at most 2"),  # a checkpoint keeps < 2**53
    (TrainingConfig, "max_tokens", np.uint64(2 ** 64 - 1), "max_tokens must be at most 2"),
    (TrainingConfig, "steps", -10 ** 400, "steps must be an integer of at least 1, got -1000"),
    pytest.param(TrainingConfig, "keep", 10 ** 5000, "keep must be at most 2.* got an integer of 16,610 bits",
                 id="an int Python will not print"),
    (SearchConfig, "max_len_b", 10 ** 20, "max_len_b must be at most 1,000,000, got"),  # its own bound first
    (TransformerConfig, "d_model", -2 ** 4097, "d_model must be at most 2"),
    # NaN, infinity, bools, text, numbers too large for a float where a float goes
    (TransformerConfig, "dropout", NAN, r"dropout must be a finite number in \[0.0, 1.0\), got nan"),
    (TransformerConfig, "layer_norm_eps", np.float32(INF), "layer_norm_eps must be a finite number"),
    (TransformerConfig, "label_smoothing", True, "label_smoothing must be a finite number"),
    (TrainingConfig, "epochs", 10 ** 400, "epochs must be a finite number, got an integer of 1,329 bits"),
    (TrainingConfig, "eps", "1e-9", "eps must be a finite number"),
    (TrainingConfig, "clip_norm", INF, "clip_norm must be a finite number"),
    (SearchConfig, "alpha", NAN, "alpha must be a finite number"),
    (SearchConfig, "max_len_a", 10 ** 400, "max_len_a must be a finite number"),
    # numbers, text and None where a bool goes
    (TransformerConfig, "norm_first", 1, "norm_first must be true or false, got 1"),
    (TransformerConfig, "share_embeddings", "yes", "share_embeddings must be true or false"),
    (TrainingConfig, "progress", 0, "progress must be True or False, got 0"),
    (TrainingConfig, "cuda_graphs", None, "cuda_graphs must be True or False"),
    # betas: a pair, of numbers in [0, 1)
    (TrainingConfig, "betas", (0.9,), r"betas must be a pair of numbers \(beta1, beta2\), got \(0.9,\)"),
    (TrainingConfig, "betas", (0.9, 0.98, 0.999), "betas must be a pair of numbers"),
    (TrainingConfig, "betas", 0.9, "betas must be a pair of numbers"),
    (TrainingConfig, "betas", "ab", "betas must be a pair of numbers"),
    (TrainingConfig, "betas", np.array([0.9, 0.98]), "betas must be a pair of numbers"),
    (TrainingConfig, "betas", (0.9, NAN), r"betas\[1\] must be a finite number in \[0.0, 1.0\), got nan"),
    (TrainingConfig, "betas", (1.0, 0.98), r"betas\[0\] must be a finite number"),
    (TrainingConfig, "betas", (True, 0.98), r"betas\[0\] must be a finite number"),
    # text where text goes, nothing else
    (TransformerConfig, "positional", 5, "positional must be 'sinusoidal' or 'learned', got 5"),
    (SearchConfig, "stop", ["exact"], "stop must be one of"),
])
def test_every_field_of_the_wrong_type_or_shape_is_refused_when_made_naming_it(cls, field, value, message):
    owner = cls.__name__
    extra = {"steps": 5} if cls is TrainingConfig and field != "steps" else {}
    with pytest.raises(ValueError, match=f"{owner}: {message}") as e:
        cls(**extra, **{field: value})
    assert e.value.setting.startswith(field) and "\n" not in str(e.value)


def test_numpy_scalars_are_converted_exactly_to_the_plain_type_each_field_declares():
    """The rule of config.py's docstring: np.int64(16) is the int 16, np.float32(0.25) the float 0.25,
    np.True_ is True; a checkpoint's JSON then writes and reads back what was made."""
    config = TransformerConfig.tiny(vocab_size=np.int64(300), d_model=np.int32(16), n_heads=np.uint8(2),
                                    d_ff=np.int16(32), dropout=np.float32(0.25), label_smoothing=0,
                                    norm_first=np.True_, positional=np.str_("learned"))
    expected = {"vocab_size": 300, "d_model": 16, "n_heads": 2, "d_ff": 32, "dropout": 0.25,
                "label_smoothing": 0.0, "norm_first": True, "positional": "learned"}
    for name, value in expected.items():
        assert type(getattr(config, name)) is type(value) and getattr(config, name) == value, name
    assert TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    training = TrainingConfig(steps=np.int64(3), epochs=None, lr_scale=2, betas=[np.float32(0.5), 0.98],
                              eps=np.float64(1e-9), progress=np.False_,
                              search=SearchConfig(beam_size=np.int64(2), max_len_a=np.float16(1.5)))
    assert type(training.steps) is int and type(training.lr_scale) is float and training.lr_scale == 2.0
    assert training.betas == (0.5, 0.98) and all(type(b) is float for b in training.betas)
    assert training.progress is False and type(training.search.beam_size) is int
    assert training.search.max_len_a == 1.5 and type(training.search.max_len_a) is float
    json.dumps(dataclasses.asdict(training))          # no NumPy scalar left for JSON to refuse
    assert TrainingConfig(steps=2 ** 53 - 1).steps == 2 ** 53 - 1      # the bound itself passes


def test_configs_and_options_bound_integers_alike():
    """The CLI's options (run/host.py, imported before NumPy) and the configs keep the same bound:
    a run never accepts an integer its checkpoints refuse."""
    from minitransformer import config
    from minitransformer.run import host
    assert config.MAX_INT == host.MAX_EXACT == 2 ** 53 - 1
