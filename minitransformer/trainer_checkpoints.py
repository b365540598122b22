"""The Trainer's checkpoints (training.py's Trainer inherits these): what one holds, writing one, and
resuming a run from one, exactly (rundir.py keeps the run directory; checkpoint.py the file format).
"""
import os
from dataclasses import asdict

import numpy as np

from . import checkpoint as ckpt
from . import rundir


class TrainerCheckpoints:
    """state(), save() and resume(path) of a Trainer: they read its model, optimizer, batch stream, step,
    best BLEU, run directory and settings."""

    def state(self):
        """(model arrays, meta, optimizer arrays): everything a checkpoint holds."""
        scalars, arrays = self.optimizer.state_dict()
        meta = {"config": self.model.config.to_dict(), "training": rundir.jsonable(asdict(self.training_config)),
                "step": self.step, "optimizer": scalars, "iterator": self._iter_state,
                "seed": self.training_config.seed, "best_bleu": self.best_bleu, "identity": self.identity,
                "tokenizer_path": None if self.tokenizer_path is None else os.path.abspath(self.tokenizer_path),
                "tokenizer": ckpt.tokenizer_to_json(self.tokenizer) if self.tokenizer is not None else None}
        return self.model.state_dict(), meta, arrays

    def save(self):
        """Write a checkpoint (atomically) if every array in it is finite (else stop with TrainingError);
        keep the last `keep` step checkpoints of this run, and copy this one to checkpoint_best.npz
        when the latest evaluation was the best so far."""
        if self.run_dir is None:
            return None
        if self._pending:
            self._read_losses()  # never save a model whose loss was not checked
        model, meta, arrays = self.state()
        if not all(np.isfinite(a).all() for group in (model, arrays) for a in group.values()):
            self._stop(self.step, "the weights or Adam's moments hold NaN or infinity after the update")
        self.last_checkpoint = self.run_dir.save(self.step, model, meta, arrays, best=self._best_pending)
        self._best_pending = False
        return self.last_checkpoint

    def resume(self, path):
        """Continue from a checkpoint of this run (rundir.load_resumable: the same model, tokenizer, corpus
        and schedule): model, optimizer, step, batch-stream position, best BLEU."""
        ck = rundir.load_resumable(path, self.model.config.to_dict(), self.identity,
                                   asdict(self.training_config), self.total_steps, self.log)
        try:
            self.model.load_state_dict(ck.model)
            self.optimizer.load_state_dict(ck.meta["optimizer"], ck.optim)
            self.iterator.load_state_dict(ck.meta["iterator"])
        except ValueError as e:  # a crafted file: n_params, shapes or the stream's settings do not fit
            raise ckpt.CheckpointError(f"{path} cannot be resumed from: {e}") from None
        self._iter_state = self.iterator.state_dict()
        self.step, self.best_bleu, self.last_checkpoint = int(ck.meta["step"]), ck.meta.get("best_bleu"), path
        self.log(f"resumed from {path} at step {self.step}")
        return ck
