"""The same model in plain PyTorch eager, for side-by-side benchmarks only (PyTorch is never a
dependency of minitransformer). Post-LN layers, sinusoidal positions, one embedding matrix shared by
source, target and the output projection and scaled by sqrt(d_model), dropout on embeddings and on
every sub-layer output, attention through torch's scaled_dot_product_attention."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, dropout, self_attention):
        super().__init__()
        self.h, self.p, self.self_attention = n_heads, dropout, self_attention
        if self_attention:
            self.w_qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.w_q, self.w_kv = nn.Linear(d_model, d_model), nn.Linear(d_model, 2 * d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, x, memory, mask):
        B, T, D = x.shape
        if self.self_attention:
            q, k, v = self.w_qkv(x).split(D, dim=-1)
        else:
            q, (k, v) = self.w_q(x), self.w_kv(memory).split(D, dim=-1)
        heads = lambda t: t.view(B, -1, self.h, D // self.h).transpose(1, 2)   # (B, H, T, K)
        o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask,
                                           dropout_p=self.p if self.training else 0.0)
        return self.w_o(o.transpose(1, 2).reshape(B, T, D))


class Layer(nn.Module):
    def __init__(self, cfg, cross):
        super().__init__()
        d = cfg.d_model
        self.self_attn = Attention(d, cfg.n_heads, cfg.dropout, True)
        self.cross_attn = Attention(d, cfg.n_heads, cfg.dropout, False) if cross else None
        self.ff = nn.Sequential(nn.Linear(d, cfg.d_ff), nn.ReLU(), nn.Linear(cfg.d_ff, d))
        self.norms = nn.ModuleList(nn.LayerNorm(d, eps=1e-6) for _ in range(3 if cross else 2))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, self_mask, memory=None, cross_mask=None):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, self_mask)))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, cross_mask)))
        return self.norms[-1](x + self.drop(self.ff(x)))


class TorchTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model ** -0.5)
        self.encoder = nn.ModuleList(Layer(cfg, False) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(Layer(cfg, True) for _ in range(cfg.n_decoder_layers))
        self.drop = nn.Dropout(cfg.dropout)
        pos = torch.arange(1024)[:, None]
        div = torch.exp(torch.arange(0, cfg.d_model, 2) * (-math.log(10000.0) / cfg.d_model))
        pe = torch.zeros(1024, cfg.d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def embed_tokens(self, ids):
        return self.drop(self.embed(ids) * math.sqrt(self.cfg.d_model) + self.pe[: ids.shape[1]])

    def forward(self, src, tgt_in):
        pad = self.cfg.pad_id
        src_mask = (src != pad)[:, None, None, :]                                     # (B, 1, 1, S)
        T = tgt_in.shape[1]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=src.device))
        tgt_mask = (tgt_in != pad)[:, None, None, :] & causal                         # (B, 1, T, T)
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, tgt_mask, x, src_mask)
        return y @ self.embed.weight.T                                                  # (B, T, V)
