"""Training: the Trainer loop (section 5), evaluation when due (translation.py), checkpoints and
exact resumption (state, save, resume), on the GPU optionally as replayed CUDA graphs (replay.py).

One update = `accum` batches of about `max_tokens` tokens each; their losses are weighted by their
target-token counts so the update sees the mean over every target token of all of them (the paper's
~25,000 tokens per update, reached on one device by accumulation). The learning rate follows eq.
(3). Resuming is exact, bit for bit, on the CPU and on the same GPU model, CUDA and CuPy
(tests/test_training.py, on the GPU too): dropout is re-seeded every step from (seed, step); the
batch stream's position is saved. Data parallel (distributed.py, lesson 12): under mpiexec, rank r
of N runs batches r, r+N, ... of each update's accum x N, weighted by their share of all N ranks'
tokens, and the ranks sum their gradients.
Left out on purpose: mixed precision, early stopping.
"""
import math
import time
from dataclasses import asdict

import numpy as np
from tqdm import tqdm

from .. import backend
from . import checkpoint as ckpt
from . import distributed, host, rundir, translation
from ..config import TrainingConfig
from ..text.corpus import encode_pairs
from ..text.data import BatchIterator
from .distributed import step_seed
from .host import Terminated  # noqa: F401  (SIGTERM's KeyboardInterrupt, named here too)
from .replay import StepGraphs, memory_mb
from .resume import load_resumable, run_identity, run_meta
from .metrics import perplexity
from ..optim import Adam, WarmupSchedule, clip_grad_norm


# ---------------------------------------------------------------- training
class TrainingError(RuntimeError):
    """Training cannot go on (a diverged loss, non-finite weights); the message says what to do."""


class Trainer:
    """Train `model` on `train_pairs` ((src_ids, tgt_ids) lists) and evaluate on `valid`
    ((source lines, reference lines), raw text, or None).

        trainer = Trainer(model, tokenizer, pairs, (valid_src, valid_ref),
                          TrainingConfig(steps=1000), "runs/x")
        trainer.resume("runs/x/checkpoint_0000500.npz")   # optional
        summary = trainer.train()

    The training loss is the label-smoothed cross-entropy per target token, and its "ppl" is
    exp(that loss): it has a floor above 1 when smoothing is on (lesson 09). Evaluation reports the
    validation loss and perplexity without smoothing, and sacreBLEU.
    Writes out_dir/log.jsonl (a JSON object per logged step and evaluation) and checkpoints
    (rundir.py).
    `callbacks` are called as cb(trainer) after every update; one may raise KeyboardInterrupt (a
    checkpoint is saved, train() returns with stopped="interrupted"). SIGTERM is handled the same
    way (stopped="terminated"); see docs/reliability.md. In a data-parallel `world`
    (distributed.world() by default), rank 0 alone writes files, logs, shows progress and evaluates.
    """

    def __init__(self, model, tokenizer, train_pairs, valid=None, training_config=None,
                 out_dir=None, callbacks=(), tokenizer_path=None, log=None, world=None):
        self.model = model
        self.tokenizer = tokenizer
        self.training_config = training_config or TrainingConfig(steps=1000)
        self.out_dir = out_dir
        self.callbacks = list(callbacks)
        self.tokenizer_path = tokenizer_path
        self.world = world or distributed.world()
        self.log = (log or tqdm.write) if self.world.is_main else (lambda message: None)
        # the run's settings; the model's special ids
        training_config = self.training_config
        ids = model.config
        if tokenizer is not None and tokenizer.vocab_size != ids.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size:,} ids but the model was "
                             f"built for {ids.vocab_size:,}: "
                             "build it with vocab_size=tokenizer.vocab_size")
        self.optimizer = Adam(model.parameters(), lr=0.0, betas=training_config.betas,
                              eps=training_config.eps)
        self.schedule = WarmupSchedule(ids.d_model, training_config.warmup_steps,
                                       training_config.lr_scale)
        special = ids.pad_id, ids.bos_id, ids.eos_id
        self.iterator = BatchIterator(train_pairs, training_config.max_tokens, *special,
                                      seed=training_config.seed)
        # an update's batches are planned at once: at most an epoch's; at most 2**53 updates
        host.check_plan("Trainer", training_config, len(self.iterator), self.world.size)
        self.valid = valid
        self.valid_iterator = None
        if valid is not None:
            pairs, _ = encode_pairs(valid[0], valid[1], tokenizer)
            if pairs:
                self.valid_iterator = BatchIterator(pairs, training_config.max_tokens, *special,
                                                    shuffle=False)
        self.run_dir = (rundir.RunDirectory(out_dir, training_config.keep)
                        if out_dir is not None and self.world.is_main else None)
        self.identity = run_identity(tokenizer and tokenizer.to_json(), train_pairs,
                                     ids.to_dict())  # resume
        self.step = 0
        self.best_bleu = None
        self.last_checkpoint = None
        # the latest evaluation was the best: copy the next checkpoint
        self._best_pending = False
        # step -> training loss (per target token), as read from the device
        self.losses = {}
        # the stream's position after the last whole step
        self._iter_state = self.iterator.state_dict()
        # (step, device loss, target tokens) not yet read
        self._pending = []
        # target tokens since the last loss read-out (for tokens/s) ...
        self._window_tokens = 0
        # ... and when that window began
        self._window_start = time.perf_counter()
        # when train() began: log records carry the seconds since
        self._started = time.perf_counter()
        # Ctrl-C and SIGTERM: never acted on inside an update or a save (host.StopSignals)
        self.signals = host.StopSignals(alone=self.world.size == 1)
        # rank threads hold one copy of the weights, each updating its part
        self._shared = False
        self.log_every = training_config.log_every or (20 if backend.device == "gpu" else 1)
        # a cuda_graphs run's StepGraphs (graphs.py), made at its first update
        self.graphs = None
        if training_config.cuda_graphs:
            StepGraphs.check(self.world.size)  # the CPU, several ranks: refused before any work
        # a loss far above ln V (what a uniform guess scores) has diverged even while it is finite
        self.divergence_limit = max(10 * math.log(ids.vocab_size), 20.0)

    # ---------------------------------------------------------------- one update
    @property
    def total_steps(self):
        t = self.training_config
        batches = len(self.iterator)
        return int(t.steps) if t.steps is not None else max(1, math.ceil(
            t.epochs * batches / (t.accum * self.world.size)))

    def train_step(self):
        """One update over `accum` batches (on each rank); returns (device loss per target token,
        target tokens, of all ranks). self.step advances only once the update is complete."""
        training_config = self.training_config
        world = self.world
        step = self.step + 1
        # dropout masks: (seed, step, rank) only
        backend.seed(step_seed(training_config.seed, step, world.rank))
        plans = [self.iterator.next_indices() for _ in range(training_config.accum * world.size)]
        # the update's target tokens, every rank's
        n_total = sum(map(self.iterator.target_tokens, plans))
        # r, r+N, r+2N, ...: each built when its turn comes, one batch in memory at a time
        batches = (self.iterator.make_batch(idx) for idx in plans[world.rank::world.size])
        step_loss = None
        graphs = training_config.cuda_graphs
        # forward, backward and Adam: one CUDA graph per batch shape, replayed (graphs.py)
        if graphs:
            self.graphs = self.graphs or StepGraphs(self.model, self.optimizer,
                                                    on_failure=self._graphs_failed)
            step_loss = self.graphs.step(next(batches), self.schedule(step))
        for b in [] if graphs else batches:
            # per target token
            loss = self.model.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask)
            # each batch's mean weighted by its share of the tokens: the mean over all n_total
            # tokens
            loss = loss * (b.n_tgt_tokens / n_total)
            loss.backward()
            step_loss = loss.data if step_loss is None else step_loss + loss.data
        # a signal from here on stops the run after this update, never inside it
        with self.signals.whole():
            if world.size > 1:  # each rank holds its batches' part of the sums: add them up
                # clipping reads the whole sum; a signal from now on counts for the next update
                own_part = self._shared and not training_config.clip_norm
                step_loss, stops = distributed.sum_over_ranks(world, self.optimizer, step_loss,
                                                              self.signals.take(), own_part)
            if training_config.clip_norm:
                clip_grad_norm(self.optimizer.params, training_config.clip_norm)
            if not graphs:
                # rank threads: this rank's part of the one copy
                self.optimizer.step(self.schedule(step))
                self.optimizer.zero_grad()
                if self._shared:
                    # every part updated before any rank's next forward reads the weights
                    world.barrier()
            self.step = step
            self._iter_state = self.iterator.state_dict()
            self._pending.append((step, step_loss, n_total))
        # a signal reached some rank (or came mid-update): every rank stops here, loss logged
        self.signals.stop(stops if world.size > 1 else self.signals.take())
        return step_loss, n_total

    def _graphs_failed(self, what):
        """StepGraphs' sentence when a recording or a replay fails (the run goes on): printed,
        logged."""
        self.log(what)
        self._write_log({"step": self.step + 1, "event": "cuda_graphs_failed", "what": what})

    def _read_losses(self, bar=None):
        """Copy the pending device losses to the host (one sync), log them, stop on a non-finite
        one."""
        if not self._pending:
            return
        with self.signals.whole():  # a signal waits: the losses taken off _pending are logged
            xp = backend.xp
            values = backend.to_numpy(xp.stack([xp.asarray(l, dtype=xp.float32)
                                                for _, l, _ in self._pending]))
            steps = [s for s, _, _ in self._pending]
            self._pending = []
            for s, v in zip(steps, values.tolist()):
                if not math.isfinite(v) or v > self.divergence_limit:
                    self._stop(s, f"the loss became {v}")
                self.losses[s] = v
            now = time.perf_counter()
            loss = float(np.mean(values))
            record = {"step": self.step, "seconds": round(now - self._started, 2), "loss": loss,
                      "ppl": perplexity(loss), "lr": self.optimizer.lr,
                      "tokens_per_s": self._window_tokens / max(now - self._window_start, 1e-9),
                      "epoch": self.iterator.epoch}
            if backend.device == "gpu":  # the memory pools' bytes in use (xp is cupy here)
                record["gpu_mem_mb"] = memory_mb(self.graphs)
            self._window_tokens = 0
            self._window_start = now
            self._write_log(record)
            if bar is not None:
                mem = {"mem": f"{record['gpu_mem_mb']:.0f}MB"} if "gpu_mem_mb" in record else {}
                bar.set_postfix({"loss": f"{loss:.3f}", "ppl": f"{record['ppl']:.1f}",
                                 "lr": f"{record['lr']:.2e}",
                                 "tok/s": f"{record['tokens_per_s']:.0f}", **mem}, refresh=False)

    def _stop(self, step, what):
        """Stop with a TrainingError that names the last checkpoint saved (every one holds finite
        arrays)."""
        where = (f"the last good checkpoint is {self.last_checkpoint}" if self.last_checkpoint
                 else "no checkpoint was saved before it")
        self._write_log({"step": step, "event": "diverged", "what": what})
        raise TrainingError(f"training stopped: {what} at step {step}; {where}. "
                            f"Try a lower learning rate (lr_scale), a longer warmup or clip_norm.")

    # ---------------------------------------------------------------- the loop
    def train(self):
        """Run until total_steps; returns a summary dict (stopped: "done", "interrupted" by Ctrl-C
        or a callback's KeyboardInterrupt, or "terminated" by SIGTERM; a checkpoint is saved in
        every case). Holds out_dir's lock (rundir.owning: refused at once while another run writes
        there); refuses (CheckpointError) an out_dir holding a later checkpoint than the start."""
        with rundir.owning(self.out_dir if self.run_dir is not None else None):
            # Ctrl-C and SIGTERM from here on (a note of an earlier train() is spent)
            self.signals = host.StopSignals(alone=self.world.size == 1)
            try:
                return self._train()
            finally:
                self.signals.release()

    def _train(self):
        training_config = self.training_config
        total = self.total_steps
        self.model.train()
        # freed arrays stay in the heap for the next update: no page faults
        host.keep_freed_memory()
        bar = tqdm(total=total, initial=self.step,
                   disable=not (training_config.progress and self.world.is_main),
                   unit="step", dynamic_ncols=True)
        start = time.perf_counter()
        start_step = self.step
        stopped = "done"
        tokens = 0
        self._started = start
        self._window_start = start
        self._window_tokens = 0
        if self.run_dir is not None:  # before anything is written there
            self.run_dir.check_start(self.step)
        self._write_log({"event": "start", "step": self.step, "total_steps": total,
                         "identity": self.identity, "training": asdict(training_config),
                         "model": self.model.config.to_dict()})
        due = lambda every: bool(every) and self.step % every == 0
        # data parallel: every rank starts from rank 0's weights; rank threads: one copy, each rank
        # updating its part
        self._shared = distributed.start_together(self.world, self.optimizer)
        signals = self.signals
        try:
            signals.catch()
            while self.step < total:
                loss, n = self.train_step()
                self._window_tokens += n
                tokens += n
                bar.update(1)
                evaluate_now = due(training_config.eval_every)
                save_now = due(training_config.save_every)
                if due(self.log_every) or evaluate_now or save_now or self.step == total:
                    self._read_losses(bar)
                if self.step < total and (evaluate_now or save_now):
                    if evaluate_now:
                        self.evaluate()
                    if save_now or self._best_pending:  # the best copy holds the weights judged
                        self.save()
                    signals.stop_if_noted()  # a signal during the save: stop now it is written
                    # tokens/s: training only
                    self._window_tokens = 0
                    self._window_start = time.perf_counter()
                for cb in self.callbacks:
                    cb(self)
            signals.stopping = True  # every step done: a signal until the save is only noted
        except KeyboardInterrupt as e:
            # from the first stop (a callback's too) to the end of its save, a signal is only noted
            signals.stopping = True
            # a step cut short is forgotten: the batch stream goes back to the last whole step
            stopped = "terminated" if isinstance(e, Terminated) else "interrupted"
            self.iterator.load_state_dict(self._iter_state)
            self.optimizer.zero_grad()
            self.log(f"{stopped} ({'SIGTERM' if stopped == 'terminated' else 'Ctrl-C'}) at step "
                     f"{self.step}" + (": saving a checkpoint" if self.run_dir is not None else ""))
        finally:
            bar.close()
            # CuPy's own GEMMs again; the graphs and their memory dropped
            if self.graphs is not None:
                self.graphs.close()
                self.graphs = None
        self.save()                     # first the work, then the final evaluation
        stopped = self._evaluate_at_end(stopped)
        self.world.barrier()            # data parallel: no rank ends before rank 0 has saved
        self.world.stopped_together = True
        seconds = time.perf_counter() - start
        summary = {"stopped": stopped, "step": self.step, "steps_run": self.step - start_step,
                   "seconds": seconds, "tgt_tokens": tokens,
                   "tokens_per_s": tokens / max(seconds, 1e-9),
                   "best_bleu": self.best_bleu, "checkpoint": self.last_checkpoint,
                   "last_loss": self.losses[max(self.losses)] if self.losses else None}
        self._write_log({"event": "end", **summary})
        return summary

    def _evaluate_at_end(self, stopped):
        """The final evaluation of a run that did every step, and its best copy; skipped when a
        signal came since the last update, and cut short by one during it (the work is saved):
        returns how the run stopped ("done", or as that signal says)."""
        seen = self.signals.take()
        if stopped != "done" or any(seen):
            return stopped if stopped != "done" else ("terminated" if seen[1] else "interrupted")
        self.signals.stopping = False   # rank 0 evaluates alone: a signal may stop it at once
        self.signals.alone = True
        try:
            self.evaluate()
            self.signals.stopping = True
        except KeyboardInterrupt as e:
            return "terminated" if isinstance(e, Terminated) else "interrupted"
        if self._best_pending:
            # the same step again, its meta now with the best BLEU, and its best copy
            self.save()
        return stopped

    # ---------------------------------------------------------------- evaluation
    def evaluate(self):
        """Validation loss (per target token, without label smoothing) and sacreBLEU of the
        translations of the validation sources; logged, printed, and returned as a dict."""
        if self.valid is None or not self.world.is_main:
            return {}
        training_config = self.training_config
        n = training_config.eval_sentences or None  # None: all of them
        src = self.valid[0][:n]
        ref = self.valid[1][:n]
        batches = None if self.valid_iterator is None else self.valid_iterator.epoch_batches()
        result = {"step": self.step, "seconds": round(time.perf_counter() - self._started, 2),
                  **translation.evaluate(self.model, self.tokenizer, src, ref, batches,
                                         training_config.search)}
        bleu = result["bleu"]
        signature = result["bleu_signature"]
        self._write_log(result)
        loss = (f"valid loss {result['valid_loss']:.3f} (ppl {result['valid_ppl']:.2f}), "
                if "valid_loss" in result else "")
        self.log(f"step {self.step}: {loss}BLEU {bleu:.2f} ({signature})")
        if self.best_bleu is None or bleu > self.best_bleu:
            self.best_bleu = bleu
            self._best_pending = True
        return result

    def _write_log(self, record):
        if self.run_dir is not None:
            self.run_dir.log(record)

    # ------------------------------------------------------------ checkpoints
    def state(self):
        """(model arrays, meta, optimizer arrays): everything a checkpoint holds."""
        scalars, arrays = self.optimizer.state_dict()
        meta = run_meta(self.step, self.model.config.to_dict(), asdict(self.training_config),
                        scalars, self._iter_state, self.identity, self.tokenizer,
                        self.tokenizer_path, self.best_bleu)
        return self.model.state_dict(), meta, arrays

    def save(self):
        """Write a checkpoint (atomically) if every array in it is finite (else stop with
        TrainingError); keep the last `keep` step checkpoints of this run, and copy this one to
        checkpoint_best.npz when the latest evaluation was the best so far."""
        if self.run_dir is None:
            return None
        with self.signals.whole():  # a signal waits for the file to be whole
            if self._pending:
                self._read_losses()  # never save a model whose loss was not checked
            model, meta, arrays = self.state()
            if not all(np.isfinite(a).all() for group in (model, arrays) for a in group.values()):
                self._stop(self.step,
                           "the weights or Adam's moments hold NaN or infinity after the update")
            self.last_checkpoint = self.run_dir.save(self.step, model, meta, arrays,
                                                     best=self._best_pending)
            self._best_pending = False
        return self.last_checkpoint

    def resume(self, path):
        """Continue from a checkpoint of this run (resume.load_resumable: the same model, tokenizer,
        corpus and schedule): model, optimizer, step, batch-stream position, best BLEU."""
        ck = load_resumable(path, self.model.config.to_dict(), self.identity,
                            asdict(self.training_config), self.total_steps, self.log)
        try:
            self.model.load_state_dict(ck.model)
            self.optimizer.load_state_dict(ck.meta["optimizer"], ck.optim)
            self.iterator.load_state_dict(ck.meta["iterator"])
        # a crafted file: n_params, shapes or the stream's settings do not fit
        except ValueError as e:
            raise ckpt.CheckpointError(f"{path} cannot be resumed from: {e}") from None
        self._iter_state = self.iterator.state_dict()
        self.step = int(ck.meta["step"])
        self.best_bleu = ck.meta.get("best_bleu")
        self.last_checkpoint = path
        self.log(f"resumed from {path} at step {self.step}")
        return ck
