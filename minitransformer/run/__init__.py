"""Where the wings meet to train and translate (lessons 09, 10, 12): the Trainer (training), its
checkpoint files (checkpoint) and run folders (rundir), from text to a ready Trainer (pipeline),
translation and evaluation, metrics, data parallelism (distributed), and training steps replayed as
CUDA graphs (replay). docs/architecture.md.
"""
