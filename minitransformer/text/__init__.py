"""The text wing: strings and files in, token ids and batches out (lessons 08-09).

fileio (reading text, writing files atomically), bpe_learn and bpe (the tokenizer), corpus (parallel
pairs of ids), data (padding, token-count batching), demo_task (the offline demo's numbers-to-words
task). Nothing here knows of gradients: docs/architecture.md.
"""
