"""SparseMultiheadAttention: nn.MultiheadAttention's math with sparse projections, and torch's
transformer blocks with no dense weight matrix left, alike in train, eval, no_grad and
inference_mode."""

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear, SparseMultiheadAttention

TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_matches_dense_attention_with_masks(batch_first, need_weights, average):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    sparse = SparseMultiheadAttention.from_dense(mha, None)  # every weight kept: the same function
    b, lq, lk = 3, 5, 7
    shape = (lambda n: (b, n, 16)) if batch_first else (lambda n: (n, b, 16))
    q, k = torch.randn(shape(lq)), torch.randn(shape(lk))
    kpm = torch.zeros(b, lk, dtype=torch.bool)
    kpm[0, -3:] = True
    masks = [
        dict(),
        dict(key_padding_mask=kpm),
        dict(attn_mask=torch.randn(lq, lk)),  # additive float
        dict(attn_mask=torch.rand(b * 4, lq, lk) > 0.7, key_padding_mask=kpm),
    ]
    for extra in masks:
        if extra.get("attn_mask") is not None and extra["attn_mask"].dtype == torch.bool:
            extra["attn_mask"][..., 0] = False  # no row fully masked
        a, wa = mha(q, k, k, need_weights=need_weights, average_attn_weights=average, **extra)
        s, ws = sparse(q, k, k, need_weights=need_weights, average_attn_weights=average, **extra)
        torch.testing.assert_close(s, a, **TOL)
        if need_weights:
            torch.testing.assert_close(ws, wa, **TOL)
        else:
            assert ws is None


def test_causal_unbatched_and_separate_key_value_widths():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(12, 3, kdim=5, vdim=7)
    sparse = SparseMultiheadAttention.from_dense(mha, None)
    q, k, v = torch.randn(4, 12), torch.randn(6, 5), torch.randn(6, 7)
    torch.testing.assert_close(sparse(q, k, v)[0], mha(q, k, v)[0], **TOL)
    x = torch.randn(2, 5, 12)
    self_attn = SparseMultiheadAttention.from_dense(nn.MultiheadAttention(12, 3, batch_first=True), None)
    dense = nn.MultiheadAttention(12, 3, batch_first=True)
    dense.load_state_dict(
        {
            "in_proj_weight": torch.cat([self_attn.q_proj.dense_weight(), self_attn.k_proj.dense_weight(), self_attn.v_proj.dense_weight()]),
            "in_proj_bias": torch.cat([self_attn.q_proj.bias, self_attn.k_proj.bias, self_attn.v_proj.bias]),
            "out_proj.weight": self_attn.out_proj.dense_weight(),
            "out_proj.bias": self_attn.out_proj.bias,
        }
    )  # fmt: skip
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    for need in (True, False):
        a = dense(x, x, x, attn_mask=mask, is_causal=True, need_weights=need)[0]
        s = self_attn(x, x, x, attn_mask=mask, is_causal=True, need_weights=need)[0]
        torch.testing.assert_close(s, a, **TOL)
        s2 = self_attn(x, x, x, is_causal=True, need_weights=need)[0]  # the hint alone
        torch.testing.assert_close(s2, a, **TOL)


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_has_no_dense_matrix_and_evaluates_like_training(batch_first):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=batch_first)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Linear(32, 32))
    sparselab.sparsify(model, 0.8)
    assert not [n for n, p in model.named_parameters() if p.dim() >= 2]  # no dense weight matrix left
    x = torch.randn(3, 6, 32) if batch_first else torch.randn(6, 3, 32)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[1, -2:] = True
    encoder = model[0]
    model.train()
    ys = [encoder(x, src_key_padding_mask=kpm)]
    model.eval()
    ys.append(encoder(x, src_key_padding_mask=kpm))
    with torch.no_grad():
        ys.append(encoder(x, src_key_padding_mask=kpm))
    with torch.inference_mode():
        ys.append(encoder(x, src_key_padding_mask=kpm).clone())
    for y in ys[1:]:
        torch.testing.assert_close(y, ys[0], rtol=0, atol=0)


def test_dense_attention_left_by_exclude_still_evaluates():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 1)
    sparselab.sparsify(encoder, 0.8, exclude="*self_attn")
    x = torch.randn(2, 5, 32)
    y = encoder(x)
    encoder.eval()
    with torch.inference_mode():  # torch's dense attention takes its own fused path here
        torch.testing.assert_close(encoder(x).clone(), y.detach(), rtol=1e-5, atol=1e-5)


def test_decoder_and_dst_update_every_projection():
    torch.manual_seed(0)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
    sparselab.sparsify(dec, 0.7, head_min_out_features=0)  # a bare decoder's last layer is no head
    sparse = [n for n, m in dec.named_modules() if isinstance(m, SparseLinear)]
    assert len(sparse) == 2 * 4 + 2  # self and cross attention, two FFN layers
    algo = sparselab.SET(0.7, update_freq=2, end=10, seed=0)
    algo.attach(dec)
    opt = algo.attach_optimizer(torch.optim.SGD(dec.parameters(), lr=0.01))
    tgt, mem = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    before = {n: m.weight_cols.clone() for n, m in dec.named_modules() if isinstance(m, SparseLinear)}
    for _ in range(2):
        opt.zero_grad()
        dec(tgt, mem).pow(2).mean().backward()
        opt.step()
        algo.step()
    moved = [
        n for n, m in dec.named_modules() if isinstance(m, SparseLinear) and not torch.equal(m.weight_cols, before[n])
    ]
    assert any(".q_proj" in n for n in moved) and any("out_proj" in n for n in moved)


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible"):
        SparseMultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="add_bias_kv"):
        SparseMultiheadAttention.from_dense(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    attn = SparseMultiheadAttention(8, 2, batch_first=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn(
            torch.randn(2, 3, 8),
            torch.randn(2, 3, 8),
            torch.randn(2, 3, 8),
            key_padding_mask=torch.zeros(2, 4, dtype=torch.bool),
        )
