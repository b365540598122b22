"""The speed wing: whole-op alternatives to the lesson modules' NumPy bodies, with the same signatures.
docs/architecture.md.
"""
