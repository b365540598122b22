"""checks.py: check_int, check_real and fail at their edges (bool, numpy scalars, inf, nan, None, open
and closed ends); SettingError and FileError as data (what the command line reads instead of the
message); and the checks this module's errors replaced (Adam, WarmupSchedule, max_tokens)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from minitransformer.checks import FileError, SettingError, check_int, check_real, fail
from minitransformer.cli.common import UsageError, option_error


def refused(check, *args, **kwargs):
    """The SettingError check(*args, **kwargs) raises (the test fails if it raises none)."""
    with pytest.raises(SettingError) as e:
        check(*args, **kwargs)
    return e.value


@pytest.mark.parametrize("value", [0, 1, 7, np.int64(3), np.int32(1), 10 ** 30])
def test_check_int_takes_integers_from_the_low_end(value):
    check_int("T", "n", value, 0)


@pytest.mark.parametrize("value", [True, False, 1.0, 2.5, "3", None, math.inf, math.nan, np.float64(2.0), -1])
def test_check_int_refuses_what_is_no_integer_of_at_least_low(value):
    e = refused(check_int, "T", "n", value, 0)
    assert str(e) == f"T: n must be an integer of at least 0, got {value!r}"
    assert (e.owner, e.setting, e.message) == ("T", "n", f"n must be an integer of at least 0, got {value!r}")
    assert e.value is value and isinstance(e, ValueError)


def test_check_int_high_end_is_closed_and_none_only_when_allowed():
    check_int("T", "n", 6, 1, 6)
    assert str(refused(check_int, "T", "n", 7, 1, 6)) == "T: n must be at most 6, got 7"
    assert "at most 1,000,000" in str(refused(check_int, "T", "n", 10 ** 7, 1, 10 ** 6))
    check_int("T", "n", None, 1, allow_none=True)
    refused(check_int, "T", "n", None, 1)


@given(st.integers(-50, 50), st.integers(-50, 50))
def test_check_int_agrees_with_the_interval(value, low):
    if value >= low:
        check_int("T", "n", value, low)
    else:
        assert refused(check_int, "T", "n", value, low).value == value


def test_check_real_ends_open_and_closed():
    check_real("T", "x", 0.0, 0.0)                                       # [0, inf): 0 is in
    check_real("T", "x", 1, 0.0, 1.0, high_open=False)                    # ints and closed high end
    check_real("T", "x", np.float32(0.5), 0.0, 1.0)
    assert str(refused(check_real, "T", "x", 0.0, 0.0, low_open=True)) == \
        "T: x must be a finite number in (0.0, inf), got 0.0"
    assert str(refused(check_real, "T", "x", 1.0, 0.0, 1.0)) == "T: x must be a finite number in [0.0, 1.0), got 1.0"
    assert "in [0.0, 1.0]" in str(refused(check_real, "T", "x", 1.5, 0.0, 1.0, high_open=False))


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, np.float64("nan"), True, None, "0.1", 1j])
def test_check_real_refuses_what_is_no_finite_real_number(value):
    e = refused(check_real, "T", "x", value, -math.inf)    # no bound can let inf or nan in
    assert e.setting == "x" and e.value is value


def test_check_real_none_only_when_allowed():
    check_real("T", "x", None, 0.0, allow_none=True)
    refused(check_real, "T", "x", None, 0.0)


def test_fail_raises_its_fields():
    e = refused(fail, "Owner", "a and b are both 0", ("a", "b"), 0)
    assert (str(e), e.owner, e.setting, e.value, e.message) == \
        ("Owner: a and b are both 0", "Owner", ("a", "b"), 0, "a and b are both 0")
    assert refused(fail, "Owner", "no setting at fault").setting is None


def test_renamed_names_the_settings_by_the_caller_s_names_and_nothing_else():
    names = {"steps": "--steps", "a": "--a", "b": "--b"}
    e = SettingError("T", "steps", "steps must be at least 1 (warmup_steps is 4000), got 0", 0)
    assert e.renamed(names) == "--steps must be at least 1 (warmup_steps is 4000), got 0"  # not warmup_--steps
    assert SettingError("T", ("a", "b"), "a and b are both 0").renamed(names) == "--a and --b are both 0"
    assert SettingError("T", "lr", "lr must be ...").renamed(names) == "lr must be ..."      # no option: as it is
    assert SettingError("T", None, "give a or b").renamed(names) == "give a or b"            # no setting at fault


def test_option_error_reads_the_fields_not_the_message():
    e = option_error(SettingError("TrainingConfig", "lr_scale", "lr_scale must be ..."), {"lr_scale": "--lr-scale"})
    assert isinstance(e, UsageError) and str(e) == "--lr-scale must be ..."
    # a message that merely mentions a setting's name does not make it that setting's error
    assert str(option_error(SettingError("T", "seed", "seed must be ..."), {"lr_scale": "--lr-scale"})) == \
        "seed must be ..."
    assert str(option_error(ValueError("lr_scale is bad"), {"lr_scale": "--lr-scale"})) == "lr_scale is bad"


def test_file_error_names_the_file_and_the_line():
    e = FileError("train.de", 3, "is not valid UTF-8 (invalid start byte at byte 8 of the line)")
    assert str(e) == "train.de: line 3 is not valid UTF-8 (invalid start byte at byte 8 of the line)"
    assert (e.path, e.line) == ("train.de", 3) and e.message.startswith("is not valid UTF-8 (invalid")
    assert isinstance(e, ValueError)
    assert str(FileError("-", 2, "has 9 tokens")) == "stdin: line 2 has 9 tokens"
    assert str(FileError("a.gz", None, "holds gzip-compressed data")) == "a.gz holds gzip-compressed data"
    unnamed = FileError(None, 5, "has 300 tokens")                       # the caller alone knows the file
    assert str(unnamed) == "line 5 has 300 tokens" and unnamed.path is None
    named = unnamed.in_file("in.txt")
    assert str(named) == "in.txt: line 5 has 300 tokens" and (named.path, named.line) == ("in.txt", 5)


def test_reading_a_file_raises_a_file_error(tmp_path):
    from minitransformer.text.fileio import read_lines
    (tmp_path / "bad.txt").write_bytes(b"good\nb\xe4d\n")
    with pytest.raises(FileError) as e:
        read_lines(tmp_path / "bad.txt")
    assert (e.value.path, e.value.line) == (str(tmp_path / "bad.txt"), 2)


def test_adam_refuses_what_check_real_refuses():
    import minitransformer as mt
    from minitransformer.optim import Adam
    p = mt.tensor(np.ones(2), requires_grad=True)
    for kwargs, setting in ((dict(eps=math.inf), "eps"), (dict(eps=math.nan), "eps"), (dict(eps=-1e-9), "eps"),
                            (dict(weight_decay=-0.1), "weight_decay"), (dict(weight_decay=math.nan), "weight_decay"),
                            (dict(betas=(0.9, math.nan)), "betas"), (dict(betas=(0.9, 1.0)), "betas")):
        assert refused(Adam, [p], **kwargs).setting == setting
    assert refused(Adam, []).setting == "params"


def test_warmup_schedule_refuses_instead_of_truncating():
    from minitransformer.optim import WarmupSchedule
    assert refused(WarmupSchedule, 512.7, 4000).setting == "d_model"        # was int(512.7) = 512, silently
    assert refused(WarmupSchedule, 512, 10.9).setting == "warmup_steps"
    assert refused(WarmupSchedule, 512, 0).setting == "warmup_steps"
    for scale in (0.0, -1.0, math.inf, math.nan):
        assert refused(WarmupSchedule, 512, 4000, scale).setting == "scale"
    assert WarmupSchedule(np.int64(512), 4000, 2).scale == 2.0


def test_max_tokens_is_checked_alike_by_batch_by_tokens_and_batch_iterator():
    from minitransformer.text.data import BatchIterator, batch_by_tokens
    pairs = [([5, 6], [7]), ([8], [9, 10])]
    for bad in (2.5, 0, True, None):
        a = refused(batch_by_tokens, pairs, bad)
        b = refused(BatchIterator, pairs, bad, 0, 1, 2)
        assert a.message == b.message == f"max_tokens must be an integer of at least 1, got {bad!r}"
