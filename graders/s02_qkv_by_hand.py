"""Hidden cases for section 02 (smoke version; extended by the section author)."""
import torch

from .spec import Case, Exercise, Mistake, Section, Variant

SDPA_REF = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights
'''

SDPA = Exercise(
    name="scaled_dot_product_attention",
    cell="sdpa",
    reference=SDPA_REF,
    mistakes=[
        Mistake("no_scale", "the scores are not divided by √d_k.", SDPA_REF.replace(" / math.sqrt(d_k)", "")),
        Mistake("softmax_axis", "the softmax runs over the wrong axis: each row (one query, all keys) must sum to 1.",
                SDPA_REF.replace("dim=-1", "dim=-2")),
    ],
    variants=[Variant("einsum", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    s = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(mask == 0, float("-inf"))
    w = s.softmax(-1)
    return torch.einsum("...qk,...kd->...qd", w, V), w
''')],
    cases=[
        Case("unmasked", "a batch of 2, 3 queries, 4 keys, d_k=8",
             args=lambda g: (torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g),
                             torch.randn(2, 4, 5, generator=g)),
             labels=["output", "weights"]),
        Case("float64", "float64 inputs", dtype="float64",
             args=lambda g: (torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g),
                             torch.randn(3, 8, generator=g)),
             labels=["output", "weights"]),
        Case("meta", "on the meta device", device="meta",
             args=lambda g: (torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g),
                             torch.randn(2, 3, 8, generator=g)),
             labels=["output", "weights"]),
    ],
)

SECTION = Section("02_qkv_by_hand", [SDPA])
