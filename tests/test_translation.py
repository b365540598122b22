"""Text in, text out (run/translation.py): encode_lines, translate_lines (the order of the lines
kept, beam search's output, n-best lists, the progress bar, no line break in a translation, a line
too long refused before it is encoded), validation_loss (the mean over target tokens, without
label smoothing) and evaluate (its scores, its arguments checked before any translation)."""
from dataclasses import replace

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.config import SearchConfig
from minitransformer.run.metrics import corpus_bleu, perplexity
from minitransformer.run.translation import (encode_lines, evaluate, one_line, translate_lines,
                                             validation_loss)
from minitransformer.search import beam_search, greedy_search
from minitransformer.text.data import Batch
from minitransformer.transformer import Transformer, TransformerConfig

from conftest import f32_tol, tiny_model, WordTokenizer


def make_model(seed=0, scale=1.0):
    """A small random Transformer (d_model 16, 2 + 2 layers, 23 ids); scale > 1 sharpens its output
    distributions (embeddings scaled)."""
    mt.seed(seed)
    model = Transformer(TransformerConfig.tiny(vocab_size=23, d_model=16, n_heads=2, d_ff=32,
                                               n_layers=2, max_len=64, dropout=0.1))
    model.src_embed.weight.data *= scale
    return model


# -------------------------------------------------------------------- encode_lines
def test_encode_lines_uses_encode_batch_where_the_tokenizer_has_one(task):
    tok, _, (src, _) = task

    class Batched:                                            # encode_batch only, counted
        calls = []

        def encode(self, text):
            pytest.fail("encoded line by line beside encode_batch")

        def encode_batch(self, texts):
            self.calls.append(list(texts))
            return tok.encode_batch(texts)
    lines = src[:5]
    batched = Batched()
    assert encode_lines(batched, iter(lines)) == [tok.encode(s) for s in lines]
    assert batched.calls == [lines]                           # one call for all the lines
    assert encode_lines(WordTokenizer(), ["a b", "", "c"]) == [[3, 4], [], [5]]   # encode per line


# -------------------------------------------------------------------- translate_lines
def test_translate_lines_keeps_the_order_and_matches_beam_search():
    model = make_model(seed=10, scale=3.0)
    tok = WordTokenizer()
    lines = ["a b c d e", "f", "g h", "i j k", "l m n o p q", "r s"]
    ids = [tok.encode(s) for s in lines]
    cfg = SearchConfig(beam_size=4, alpha=0.6, max_len_a=1, max_len_b=5)
    want = [tok.decode(hs[0].tokens) for hs in beam_search(model, ids, cfg)]
    assert translate_lines(model, tok, lines, cfg, batch_size=4) == want
    nbest = translate_lines(model, tok, lines, replace(cfg, nbest=3), batch_size=2)
    assert [n[0] for n in nbest] == want and all(len(n) == 3 for n in nbest)
    greedy = [tok.decode(h.tokens) for h in greedy_search(model, ids, cfg)]
    assert translate_lines(model, tok, lines, replace(cfg, beam_size=1)) == greedy


def test_translate_lines_progress_counts_every_sentence_on_stderr(capsys):
    model, tok = make_model(seed=10, scale=3.0), WordTokenizer()
    lines = ["a b c d e", "f", "g h", "i j k", "l m n o p q"]
    translate_lines(model, tok, lines, SearchConfig(max_len_b=5), batch_size=2)
    assert capsys.readouterr().err == ""                                        # off by default
    translate_lines(model, tok, lines, SearchConfig(max_len_b=5), batch_size=2, progress=True)
    err = capsys.readouterr().err
    assert "translating" in err and "5/5" in err


class BreakingTokenizer(WordTokenizer):
    """Every id decodes to a word followed by a line break of another kind: a tokenizer that would
    emit them."""
    words = ["a\n", "b\r\n", "c\r", "d\u2028", "e\u2029", "f\x85", "g\x0b", "h\x0c"] * 3

    def encode(self, s):
        return [3 + "abcdefgh".index(w) for w in s.split()]


def test_no_translation_holds_a_line_break():
    model = make_model(seed=10, scale=3.0)            # emits ids 3.. freely, with max_len_b
    lines = ["a b c", "d e", "f g h"]
    cfg = SearchConfig(max_len_a=0, max_len_b=8)
    for search in (cfg, replace(cfg, beam_size=3, nbest=2)):
        out = translate_lines(model, BreakingTokenizer(), lines, search)
        flat = [t for o in out for t in (o if isinstance(o, list) else [o])]
        assert len(out) == 3 and any(t for t in flat)
        assert all(t.splitlines() == [t] or t == "" for t in flat), flat   # one line each
        assert len("\n".join(o if isinstance(o, str) else o[0] for o in out).splitlines()) == 3
    assert one_line("a\nb\r\nc\u2028d") == "a b c d"


def test_a_line_too_long_is_refused_before_it_is_encoded():
    from minitransformer.text.bpe import BPE
    from minitransformer.checks import FileError

    class Unused(BPE):                                 # no merges: tokens of one byte
        def encode_batch(self, texts, **kw):
            pytest.fail("encoded before the check")
    with pytest.raises(FileError, match="has 2,000,000 characters, more than"):
        translate_lines(make_model(seed=10, scale=3.0), Unused(), ["a", "x" * 2_000_000])



# -------------------------------------------------------------------- evaluation
def test_evaluate_refuses_unpaired_sources_before_translating(task, monkeypatch):
    from minitransformer.run import translation
    tok, _, (src, ref) = task
    model = tiny_model(tok)
    monkeypatch.setattr(translation, "translate_lines",
                        lambda *a, **k: pytest.fail("translated before the check"))
    with pytest.raises(ValueError, match=f"evaluate: {len(src)} sources but 1 references"):
        translation.evaluate(model, tok, src, ref[:1])
    with pytest.raises(TypeError,
                       match="evaluate: sources and references must be lists of sentences"):
        translation.evaluate(model, tok, src[:1], ref[0])
    with pytest.raises(ValueError,
                       match="evaluate: BLEU scores one translation per sentence: nbest must be 1"):
        translation.evaluate(model, tok, src, ref, search=SearchConfig(beam_size=2, nbest=2))
    with pytest.raises(TypeError, match="evaluate: search must be a SearchConfig, got dict"):
        translation.evaluate(model, tok, src, ref, search={"beam_size": 2})
    with pytest.raises(ValueError, match="evaluate: no sentences to evaluate on"):
        translation.evaluate(model, tok, [], [])
    with pytest.raises(ValueError, match="validation_loss: the batches hold no target token"):
        translation.validation_loss(model, [])


def batches_of(tok, pairs, sizes):
    """Consecutive Batches of `pairs`, of the given numbers of pairs."""
    starts = np.cumsum([0] + list(sizes))
    return [Batch(pairs[a:b], tok.pad_id, tok.bos_id, tok.eos_id)
            for a, b in zip(starts, starts[1:])]


def test_validation_loss_is_the_mean_over_target_tokens_without_label_smoothing(task):
    """Batches of other sizes weigh by their target tokens (not one batch, one vote), and the loss
    is the plain cross-entropy even though the model trains with label smoothing."""
    tok, pairs, _ = task
    model = tiny_model(tok)
    assert model.config.label_smoothing > 0
    batches = batches_of(tok, pairs, [1, 7, 3])
    total = count = 0.0
    worst = 0.0
    with model.inference_mode():
        got = validation_loss(model, batches)
        one_vote_each = np.mean([validation_loss(model, [b]) for b in batches])
        smoothed = sum(float(model.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask).data) *
                       b.n_tgt_tokens for b in batches) / sum(b.n_tgt_tokens for b in batches)
        for b in batches:
            z = backend.to_numpy(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask).data)
            z = z.astype(np.float64)                                  # (B, T, V) in float64
            t = backend.to_numpy(b.tgt_out)
            logp = z - z.max(-1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
            picked = np.take_along_axis(logp, t[..., None], -1)[..., 0]
            total -= picked[t != tok.pad_id].sum()
            count += (t != tok.pad_id).sum()
            worst = max(worst, np.abs(z).max())
    assert count == sum(b.n_tgt_tokens for b in batches)
    want = total / count
    # float32: each token's log-sum-exp rounds over V terms of size up to max |z|, and the mean
    # sums `count` terms of size about the loss
    V = model.config.vocab_size
    tol = f32_tol(V, worst) + f32_tol(int(count), want)
    assert abs(got - want) <= tol
    # a mean of the batches' means, or a smoothed loss, is far off: the test tells them apart
    assert abs(one_vote_each - want) > 10 * tol and abs(smoothed - want) > 10 * tol


def test_evaluate_scores_the_translations_of_the_model_in_inference_mode(task):
    """evaluate: the validation loss and its perplexity, sacreBLEU of translate_lines' output
    against the references and the fraction translated exactly, the model in inference mode (no
    dropout) and back in training mode after."""
    tok, pairs, (src, ref) = task
    model = tiny_model(tok, dropout=0.5)
    batches = batches_of(tok, pairs, [4, 4])
    search = SearchConfig(beam_size=2, max_len_b=8)
    with model.inference_mode():
        loss = validation_loss(model, batches)
        hyps = translate_lines(model, tok, src, search)
    assert model.training
    result = evaluate(model, tok, src, ref, batches, search)
    assert model.training
    assert set(result) == {"valid_loss", "valid_ppl", "bleu", "bleu_signature", "exact_match"}
    assert result["valid_loss"] == loss and result["valid_ppl"] == perplexity(loss)
    bleu, signature = corpus_bleu(hyps, [ref])
    assert (result["bleu"], result["bleu_signature"]) == (bleu, signature)
    assert result["exact_match"] == sum(h == r for h, r in zip(hyps, ref)) / len(ref)
    own = evaluate(model, tok, src, hyps, search=search)         # its own translations: all exact
    assert own["exact_match"] == 1.0 and "valid_loss" not in own
    one_off = hyps[:-1] + [hyps[-1] + " x"]
    assert evaluate(model, tok, src, one_off, search=search)["exact_match"] == pytest.approx(
        1 - 1 / len(src))
