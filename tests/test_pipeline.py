"""pipeline.prepare_training: from a few lines of text to a Trainer whose model fits the tokenizer,
with the tokenizer learned, given, or reused when resuming."""
import pytest

from minitransformer.text.bpe import BPE
from minitransformer.run.checkpoint import CheckpointError
from minitransformer.run.pipeline import prepare_training
from minitransformer.run.training import Trainer, TrainingConfig
from minitransformer.transformer import TransformerConfig

SOURCE = ["ein kleiner Hund", "zwei große Katzen", "ein Mann liest", "eine Frau singt", ""]
TARGET = ["a small dog", "two big cats", "a man reads", "a woman sings", "empty"]


def tiny(vocab_size):
    return TransformerConfig.tiny(vocab_size=vocab_size, d_model=16, d_ff=32, n_heads=2, n_layers=1)


def training_config(steps=2):
    return TrainingConfig(steps=steps, max_tokens=64, warmup_steps=2, eval_every=0, save_every=1, progress=False)


def test_learns_a_tokenizer_and_builds_a_matching_trainer(tmp_path):
    messages = []
    trainer, tokenizer = prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path, vocab_size=280,
                                          valid=(SOURCE[:2], TARGET[:2]), log=messages.append)
    assert isinstance(trainer, Trainer) and isinstance(tokenizer, BPE)
    assert trainer.model.config.vocab_size == tokenizer.vocab_size <= 280
    assert trainer.tokenizer is tokenizer and trainer.model.config.d_model == 16
    assert BPE.load(tmp_path / "tokenizer.json").merges == tokenizer.merges
    assert any("kept 4 of 5 pairs (1 empty" in m for m in messages)            # the empty source is dropped
    summary = trainer.train()
    assert summary["stopped"] == "done" and summary["step"] == 2


def test_given_tokenizer_and_resume(tmp_path):
    tokenizer = BPE.train(SOURCE + TARGET, 270, min_frequency=1)
    config = tiny(tokenizer.vocab_size)                                        # a config, not a function
    trainer, same = prepare_training(SOURCE, TARGET, config, training_config(), tmp_path, tokenizer=tokenizer)
    assert same is tokenizer and trainer.model.config == config
    trainer.train()
    path = tmp_path / "tok.json"
    tokenizer.save(path)
    resumed, loaded = prepare_training(SOURCE, TARGET, tiny, training_config(steps=3), tmp_path, tokenizer=path,
                                       resume="auto", log=lambda message: None)
    assert loaded.merges == tokenizer.merges and resumed.step == 2


def test_resume_reuses_the_learned_tokenizer(tmp_path, monkeypatch):
    first, tokenizer = prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path, vocab_size=280)
    first.train()
    monkeypatch.setattr(BPE, "train", None)                                    # learning again would fail
    messages = []
    resumed, reused = prepare_training(SOURCE, TARGET, tiny, training_config(steps=3), tmp_path, vocab_size=280,
                                       resume="auto", log=messages.append)
    assert reused.merges == tokenizer.merges and resumed.step == 2
    assert any("using the tokenizer learned before" in m for m in messages)


def test_resume_auto_without_a_checkpoint_leaves_an_earlier_runs_tokenizer_alone(tmp_path):
    """A run stopped before its first checkpoint leaves tokenizer.json; "auto" finds no checkpoint to
    continue and refuses, rather than replace that run's file; an empty folder starts afresh."""
    BPE.train(SOURCE + TARGET, 262, min_frequency=1).save(tmp_path / "tokenizer.json")
    before = (tmp_path / "tokenizer.json").read_bytes()
    with pytest.raises(CheckpointError, match="already holds tokenizer.json of an earlier run: "
                                              "resume='auto' finds none"):
        prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path, vocab_size=280,
                         resume="auto")
    assert (tmp_path / "tokenizer.json").read_bytes() == before
    messages = []
    fresh = tmp_path / "fresh"
    trainer, tokenizer = prepare_training(SOURCE, TARGET, tiny, training_config(), fresh,
                                          vocab_size=280, resume="auto", log=messages.append)
    assert tokenizer.vocab_size > 262 and trainer.step == 0
    assert any("starting afresh" in m for m in messages)


def test_a_new_run_into_an_earlier_runs_directory_is_refused_before_it_writes(tmp_path, monkeypatch):
    first, _ = prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path, vocab_size=280)
    first.train()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr(BPE, "train", None)                  # the refusal comes before a tokenizer is learned
    with pytest.raises(CheckpointError, match=r"already holds checkpoint_0*2\.npz.*--resume auto"):
        prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path, vocab_size=300)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before     # tokenizer.json, log.jsonl kept


def test_needs_a_tokenizer_or_a_vocab_size(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        prepare_training(SOURCE, TARGET, tiny, training_config(), tmp_path)


def test_says_when_pairs_are_longer_than_a_batch(tmp_path):
    # --max-tokens 1 trained, printing "1 tokens per update", with no word that every pair went over it.
    tokenizer = BPE.train(SOURCE + TARGET, 270, min_frequency=1)
    longest = max(max(len(tokenizer.encode(s)), len(tokenizer.encode(t))) + 1 for s, t in zip(SOURCE, TARGET) if s)
    for max_tokens, note in ((longest, None), (longest - 1, "1 pair(s)"), (1, "4 pair(s)")):
        messages = []
        config = TrainingConfig(steps=1, max_tokens=max_tokens, warmup_steps=1, eval_every=0, progress=False)
        prepare_training(SOURCE, TARGET, tiny, config, tmp_path / str(max_tokens), tokenizer=tokenizer,
                         log=messages.append)
        notes = [m for m in messages if m.startswith("note:")]
        assert notes == ([] if note is None else
                         [f"note: {note} longer than max_tokens ({max_tokens}) padded: each is a batch of its own, "
                          f"over the budget"]), messages
