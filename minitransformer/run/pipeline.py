"""From text to a ready Trainer: learn or load the BPE tokenizer, encode the training pairs,
build the model, hand them to a Trainer, and resume it from a checkpoint when asked.

The train and demo subcommands and examples/multi30k.py all start this way; the caller reads its
files, picks the device (backend.use) before, and calls trainer.train() after.
Left out on purpose: reading corpora from disk (callers read and check their own files), choosing
the device, the training loop itself (training.py), translating after training (search.py).
"""
import os

from .. import backend
from . import distributed
from ..text.bpe import BPE
from ..checks import FileError
from .rundir import check_new_run, list_checkpoints, owning
from ..text.corpus import encode_pairs
from ..text.data import count_over_budget
from .training import Trainer
from .translation import encode_fitting
from ..transformer import Transformer

TOKENIZER_FILE = "tokenizer.json"  # where a learned tokenizer is saved, in out_dir


def prepare_training(train_src, train_tgt, model_config, training_config, out_dir=None, *,
                     tokenizer=None, vocab_size=None, valid=None, max_len=None, resume=None,
                     log=print, train_names=None, valid_names=None):
    """(trainer, tokenizer): a Trainer ready to train on the parallel lines train_src, train_tgt.

    tokenizer: a BPE, the path of a BPE file, or None to learn a joint BPE of vocab_size ids on
    both sides (saved as out_dir/tokenizer.json; when resuming, the one saved there before is
    used again).
    model_config: a TransformerConfig, or a function vocab_size -> TransformerConfig (the
    vocabulary is known only once the tokenizer is). valid: (source lines, reference lines) or None.
    max_len: drop training pairs with a side longer than this many tokens (None: the longest the
    model's positions hold, config.max_len - 1; more than that is an error).
    resume: a checkpoint path, "auto" (the latest in out_dir; none there: start afresh) or None.
    train_names, valid_names: (source, target) names of the files the lines came from, for
    messages.
    The weights are initialised from training_config.seed; progress messages go to log.
    Data parallel (under mpiexec): every rank calls it alike; rank 0 alone learns or reads the
    tokenizer and finds the checkpoint to resume, and sends them to the others; only rank 0 logs.
    Everything is checked before the model is built: a corpus with no usable pair (all empty, or
    all too long), empty validation lines, a validation line too long for the model's positions
    (named by file and line) are ValueErrors.

        trainer, tok = prepare_training(src, tgt, lambda v: TransformerConfig.small(vocab_size=v),
                                        TrainingConfig(steps=1000), "runs/x", vocab_size=8000)
        summary = trainer.train()
    """
    train_names = train_names or ("the training sources", "the training targets")
    valid_names = valid_names or ("the validation sources", "the validation references")
    if resume is not None and out_dir is None:
        raise ValueError("resuming needs the out_dir of the run to continue")
    if not any(s.strip() and t.strip() for s, t in zip(train_src, train_tgt)):
        raise ValueError(f"no sentence pairs to train on: {train_names[0]} and {train_names[1]} "
                         "hold no line pair with both sides non-empty")
    if valid is not None:
        check_valid_lines(valid, valid_names)
    here = distributed.world()
    here.bind_device()
    if not here.is_main:
        log = lambda message: None  # noqa: E731
    elif distributed.thread_warning():
        log(f"warning: {distributed.thread_warning()}")
    # one run writes in out_dir; another is refused at once
    with owning(out_dir if here.is_main else None):
        # before a tokenizer.json replaces theirs
        # and "auto" with no step checkpoint starts afresh only where no earlier run wrote
        if out_dir is not None and here.is_main and (
                resume is None or (resume == "auto" and not list_checkpoints(out_dir))):
            check_new_run(out_dir, "out_dir", "continue that run (--resume auto), or "
                          if resume is None else "resume='auto' finds none of its step "
                          "checkpoints to continue; put them back, ",
                          None if tokenizer is not None else TOKENIZER_FILE)
        found = checkpoint_to_resume(resume, out_dir, log) if here.is_main else None
        checkpoint = here.broadcast_object(found)
        tokenizer_path = None
        if here.is_main:
            tokenizer, tokenizer_path = load_or_learn_tokenizer(
                (train_src, train_tgt), tokenizer, vocab_size, out_dir,
                reuse=checkpoint is not None, log=log)
        if here.size > 1:  # rank 0 learned or read it; the other ranks take its JSON text
            text = here.broadcast_object(tokenizer.to_json() if here.is_main else None)
            tokenizer = tokenizer if here.is_main else BPE.from_json(text)
        config = model_config(tokenizer.vocab_size) if callable(model_config) else model_config
        longest = config.max_len - 1                     # x </s> and <s> y must fit the positions
        if max_len is None:
            max_len = longest
        elif max_len > longest:
            raise ValueError(f"max_len {max_len} is more than the model's positions hold: "
                             f"at most {longest} (max_len {config.max_len} of the model, "
                             "with <s> or </s>)")
        pairs, report = encode_pairs(train_src, train_tgt, tokenizer, max_len=max_len)
        log(f"training data: {report}")
        if not pairs:
            raise ValueError(f"no sentence pairs to train on in {train_names[0]} and "
                             f"{train_names[1]}: {report}")
        over = count_over_budget(pairs, training_config.max_tokens)
        if over:
            log(f"note: {over:,} pair(s) longer than max_tokens "
                f"({training_config.max_tokens:,}) padded: each is a batch of its own, "
                "over the budget")
        if valid is not None:
            check_valid_lengths(valid, valid_names, tokenizer, longest)
        backend.seed(training_config.seed)
        model = Transformer(config)
        per_update = training_config.max_tokens * training_config.accum * here.size
        ranks = f" ({here.size} ranks of {per_update // here.size:,})" if here.size > 1 else ""
        log(f"model: {model.num_parameters():,} parameters; "
            f"{per_update:,} tokens per update{ranks}")
        trainer = Trainer(model, tokenizer, pairs, valid, training_config, out_dir,
                          tokenizer_path=tokenizer_path)
        if checkpoint is not None:
            trainer.resume(checkpoint)
        return trainer, tokenizer


def check_valid_lines(valid, names):
    """The validation lines: as many sources as references, and at least one pair of non-blank
    lines (BLEU needs a sentence)."""
    src, ref = valid
    if len(src) != len(ref):
        raise ValueError(f"{names[0]} has {len(src):,} lines but {names[1]} has {len(ref):,}; "
                         f"line i of one must translate line i of the other")
    if not src:
        raise ValueError(f"{names[0]} and {names[1]} are empty: there is nothing to evaluate on")
    if not any(s.strip() and r.strip() for s, r in zip(src, ref)):
        raise ValueError(f"no sentence pairs to evaluate on: {names[0]} and {names[1]} hold no "
                         "line pair with both sides non-empty")


def check_valid_lengths(valid, names, tokenizer, longest):
    """Every validation line fits the model's positions (evaluation translates them all)."""
    for lines, name in zip(valid, names):
        try:
            encode_fitting(tokenizer, list(lines), longest + 1)
        except FileError as e:
            raise e.in_file(name) from None


def load_or_learn_tokenizer(corpus, tokenizer, vocab_size, out_dir, reuse=False, log=print):
    """(BPE, its file or None): `tokenizer` itself (a BPE or a file), else the one learned before
    in out_dir when `reuse`, else a joint BPE of vocab_size ids learned on both sides of corpus
    ((source lines, target lines)), saved in out_dir."""
    if isinstance(tokenizer, BPE):
        return tokenizer, None
    if tokenizer is not None:
        loaded = BPE.load(tokenizer)
        log(f"tokenizer: {os.fspath(tokenizer)}, {loaded.vocab_size:,} ids")
        return loaded, tokenizer
    learned = None if out_dir is None else os.path.join(out_dir, TOKENIZER_FILE)
    if reuse and learned is not None and os.path.exists(learned):
        log(f"resuming: using the tokenizer learned before, {learned}")
        return BPE.load(learned), learned
    if vocab_size is None:
        raise ValueError("give a tokenizer, or the vocab_size of one to learn")
    log(f"learning a joint BPE of {vocab_size} ids on the training lines ...")
    learned_tokenizer = BPE.train(list(corpus[0]) + list(corpus[1]), vocab_size)
    if learned is not None:
        learned_tokenizer.save(learned)
    saved = f", saved to {learned}" if learned else ""
    log(f"tokenizer: {learned_tokenizer.vocab_size:,} ids "
        f"({len(learned_tokenizer.merges):,} merges){saved}")
    return learned_tokenizer, learned


def checkpoint_to_resume(resume, out_dir, log=print):
    """The checkpoint file to continue from: `resume` itself, the latest in out_dir for "auto"
    (None, and a message, when there is none yet), or None when resume is None."""
    if resume != "auto":
        return resume
    found = list_checkpoints(out_dir)
    if not found:
        log(f"resume: no checkpoint in {out_dir} yet; starting afresh")
        return None
    return found[-1]
