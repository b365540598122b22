"""Resuming a run: what a checkpoint's meta holds of the run that wrote it (run_meta), what the
run is (run_identity: fingerprints of its tokenizer, corpus and model), and the checks before a
checkpoint continues a Trainer (load_resumable): the same model, tokenizer, corpus and schedule,
and resume data of the right kinds, each refusal one sentence naming the file. The run folder
itself: rundir.py; the file format: checkpoint.py.
"""
import hashlib
import json
import math
import os

import numpy as np

from .checkpoint import CheckpointError, load, tokenizer_to_json
from .rundir import jsonable

# TrainingConfig's settings that decide the updates: a resume with other values would be another run
SCHEDULE = ("max_tokens", "accum", "warmup_steps", "lr_scale", "betas", "eps", "clip_norm", "seed")


def run_meta(step, config, training, optimizer, iterator, identity, tokenizer=None,
             tokenizer_path=None, best_bleu=None):
    """The meta of a run's checkpoint at `step`: what load_resumable checks and Trainer.resume
    reads (the model config dict, the TrainingConfig dict, Adam's scalars, the batch stream's
    position, the run_identity), the best BLEU so far, and the tokenizer (its JSON text, and the
    absolute path of its file when it has one)."""
    return {"config": config, "training": jsonable(training), "step": step,
            "optimizer": optimizer, "iterator": iterator, "seed": training["seed"],
            "best_bleu": best_bleu, "identity": identity,
            "tokenizer_path": None if tokenizer_path is None else os.path.abspath(tokenizer_path),
            "tokenizer": None if tokenizer is None else tokenizer_to_json(tokenizer)}


def run_identity(tokenizer_json, pairs, model_config):
    """What a run is, for resuming it: SHA-256 fingerprints of its tokenizer's JSON text, of its
    encoded training pairs (ids and lengths, in order: another corpus of the same length, or the
    same lines misaligned, differ) and of its model config dict, and the number of pairs. Saved
    in every checkpoint and in log.jsonl's start line; its schedule is the checkpoint's
    "training" settings."""
    corpus = hashlib.sha256()
    for src, tgt in pairs:  # the lengths first: ([1, 2], [3]) and ([1], [2, 3]) differ
        corpus.update(np.asarray([len(src), len(tgt), *src, *tgt], dtype=np.int64).tobytes())
    return {"tokenizer": _sha256(tokenizer_json), "corpus": corpus.hexdigest(),
            "pairs": len(pairs), "model": _sha256(json.dumps(model_config, sort_keys=True))}


def _sha256(text):
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is(kind, value):
    """value is JSON of `kind`: dict; bool; int (not a bool, 0 <= value < 2**53); float (any
    finite number)."""
    if kind is dict:
        return isinstance(value, dict)
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and 0 <= value < 2**53
    return isinstance(value, (int, float)) and math.isfinite(value)


def _check_fields(path, where, record, fields):
    """record is a dict whose fields have the kinds in `fields`; else a CheckpointError."""
    if not isinstance(record, dict):
        bad = "is not a JSON object"
    else:
        wrong = [(k, t) for k, t in fields.items() if not _is(t, record.get(k))]
        bad = None
        if wrong:
            k, t = wrong[0]
            kind = "an integer from 0 to 2**53" if t is int else "a " + t.__name__
            bad = f"has no {k}, or a {k} that is not {kind}"
    if bad:
        raise CheckpointError(f"{path} holds malformed resume data: its {where} {bad}")


def check_resume_data(path, meta):
    """The resume data of checkpoint `path` (its meta dict) has every field, of the right JSON
    kind and size, that Trainer.resume reads; else a CheckpointError naming the file (no
    traceback, nothing changed)."""
    for key in ("config", "optimizer", "iterator", "step"):
        if meta.get(key) is None:
            raise CheckpointError(f"{path} cannot be resumed from: it has no {key} "
                                  f"(an averaged checkpoint is for translation only)")
    _check_fields(path, "checkpoint data", meta, {"step": int, "training": dict})
    _check_fields(path, "optimizer state", meta["optimizer"],
                  {"lr": float, "eps": float, "weight_decay": float, "steps": int, "n_params": int})
    _check_fields(path, "batch stream", meta["iterator"],
                  {"epoch": int, "index": int, "seed": int, "max_tokens": int, "shuffle": bool,
                   "n_pairs": int})
    betas = meta["optimizer"].get("betas")
    counts = meta["optimizer"].get("t")
    if not (isinstance(betas, list) and len(betas) == 2 and all(_is(float, b) for b in betas)
            and isinstance(counts, list) and all(_is(int, t) for t in counts)):
        raise CheckpointError(f"{path} holds malformed resume data: "
                              "its optimizer's betas or step counts")
    if meta.get("best_bleu") is not None and not _is(float, meta["best_bleu"]):
        raise CheckpointError(f"{path} holds malformed resume data: its best_bleu is not a number")


def load_resumable(path, model_config, identity, training, total_steps, log=print):
    """load(path), checked to continue the run of a Trainer: its model config dict `model_config`,
    its run_identity `identity`, its TrainingConfig dict `training`, `total_steps` to run; a
    CheckpointError (one sentence naming the file) for malformed resume data, another model,
    tokenizer, corpus or schedule, or a step past total_steps. Other steps or epochs than before
    are said through `log`, and so is a checkpoint written before run identities existed (its
    corpus cannot be checked)."""
    ck = load(path)
    meta = ck.meta
    check_resume_data(path, meta)
    saved_config = meta["config"] if isinstance(meta["config"], dict) else {}
    if meta["config"] != model_config:
        fields = sorted(k for k in set(model_config) | set(saved_config)
                        if saved_config.get(k) != model_config.get(k))
        raise CheckpointError(f"{path} was saved for another model configuration "
                              f"(it differs in {', '.join(fields)})")
    if meta["step"] > total_steps:  # training nothing, it would only write that step again
        raise CheckpointError(f"{path} is at step {meta['step']:,}, past the {total_steps:,} "
                              f"steps of this run: ask for {meta['step']:,} steps or more "
                              "(--steps)")
    saved = meta.get("identity")
    saved_tokenizer = meta.get("tokenizer")
    if isinstance(saved_tokenizer, str):
        if identity["tokenizer"] not in (None, _sha256(saved_tokenizer)):
            raise CheckpointError(f"{path} was trained with another tokenizer than the one given")
    if not isinstance(saved, dict):
        log(f"{path} was written before runs had an identity: "
            "its corpus cannot be checked against this one")
    elif saved.get("corpus") != identity["corpus"]:
        if saved.get("pairs") != identity["pairs"]:
            how = f"{saved.get('pairs')} pairs there, {identity['pairs']:,} here"
        else:
            how = (f"as many pairs, {identity['pairs']:,}, "
                   "but other sentences or another order or alignment")
        raise CheckpointError(f"{path} was trained on another corpus ({how}): resume it with the "
                              "files it was trained on, or start a new run in another directory")
    before = meta["training"]
    now = jsonable(training)
    changed = [k for k in SCHEDULE if k in before and before[k] != now[k]]
    if changed:
        listed = ", ".join(f"{k} {before.get(k)!r} there, {now[k]!r} here" for k in changed)
        raise CheckpointError(f"{path} was trained with another schedule: {listed}; "
                              "resume with the same settings, or start a new run in another "
                              "directory")
    if (before.get("steps"), before.get("epochs")) != (now["steps"], now["epochs"]):
        log(f"resuming a run of steps={before.get('steps')}, epochs={before.get('epochs')} "
            f"with steps={now['steps']}, epochs={now['epochs']}")
    return ck
