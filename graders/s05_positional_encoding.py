"""Hidden cases for section 05: sinusoidal positional encoding and rotary embeddings (RoPE)."""
import math

import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("05_positional_encoding")   # the source notebook: solutions and given code are read from it

PE_REF = CELLS["positional_encoding"]


def _pe(old, new):
    return patch(PE_REF, old, new)


PE = Exercise(
    name="positional_encoding",
    cell="positional_encoding",
    reference=PE_REF,
    mistakes=[
        Mistake("sin_cos_swapped", "sin and cos are swapped: even features (0, 2, 4, ...) take the sine, odd ones "
                "the cosine.",
                _pe("pe[:, 0::2] = torch.sin(angle)                                # even features\n"
                    "    pe[:, 1::2] = torch.cos(angle)",
                    "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)")),
        Mistake("exponent_i", "the exponent uses the pair index i instead of 2i: the denominator is "
                "10000^(2i/d_model), so the exponents are 0, 2/d_model, 4/d_model, ...",
                _pe("angle = pos / 10000 ** (two_i / d_model)",
                    "angle = pos / 10000 ** (torch.arange(d_model // 2) / d_model)")),
        Mistake("halves", "the sines fill the first half and the cosines the second half: the two are interleaved, "
                "sin in feature 2i and cos in feature 2i+1.",
                _pe("pe[:, 0::2] = torch.sin(angle)                                # even features\n"
                    "    pe[:, 1::2] = torch.cos(angle)",
                    "pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)")),
        Mistake("positions_from_1", "the positions start at 1: the first token is position 0 (its encoding is "
                "[0, 1, 0, 1, ...]).",
                _pe("torch.arange(T, dtype=torch.float32)", "torch.arange(1, T + 1, dtype=torch.float32)")),
        Mistake("multiplied", "the positions are multiplied by 10000^(2i/d_model) instead of divided: the angle "
                "is pos / 10000^(2i/d_model), so later pairs turn more slowly.",
                _pe("angle = pos / 10000 ** (two_i / d_model)", "angle = pos * 10000 ** (two_i / d_model)")),
    ],
    variants=[
        Variant("outer_product", '''
def positional_encoding(T, d_model):
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    angle = torch.outer(torch.arange(T).float(), inv_freq)                 # (T, d_model/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, d_model)
'''),
        Variant("exp_log", '''
def positional_encoding(T, d_model):
    position = torch.arange(T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''),
    ],
    cases=[
        Case("table_5x8", "T=5, d_model=8", args=(5, 8)),
        Case("one_position", "T=1, d_model=4", args=(1, 4)),
        Case("d6", "T=12, d_model=6", args=(12, 6)),
        Case("long", "T=100, d_model=32", args=(100, 32)),
    ],
)

ROPE_REF = CELLS["apply_rope"]


def _rope(old, new):
    return patch(ROPE_REF, old, new)


ROPE_PROPERTIES = {   # what the judge tells a student whose rotation breaks an invariant of RoPE
    "property.norms": (
        "a property of rotary encodings fails: the output vectors do not keep their length. A rotation changes "
        "only directions: each pair must become (a·cos − b·sin, a·sin + b·cos) with the cos and sin of one angle; "
        "nothing may be added or scaled."),
    "property.relative": (
        "a property of rotary encodings fails: the dot product of a rotated query at position m with a rotated key "
        "at position n changes with m and n themselves, not only with m − n. Position t (its index on the "
        "second-to-last axis, from 0) must rotate pair i by t·θ_i, with the same θ_i for every position and input."),
    "property.moves": (
        "a property of rotary encodings fails: the result does not change with position: position t must rotate "
        "each pair by t·θ_i, with positions taken from the second-to-last axis."),
}

ROPE = Exercise(
    messages=ROPE_PROPERTIES,
    name="apply_rope",
    cell="apply_rope",
    reference=ROPE_REF,
    mistakes=[
        Mistake("rotate_half", "features i and i + d/2 are rotated together (the 'rotate-half' layout some "
                "libraries use); this contract rotates interleaved pairs (2i, 2i+1).",
                patch(ROPE_REF, "a, b = x[..., 0::2], x[..., 1::2]", "a, b = x[..., : d // 2], x[..., d // 2:]",
                      "torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)",
                      "torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)")),
        Mistake("stacked_as_halves", "the rotated pairs are written back as two halves (every pair's first feature, "
                "then every pair's second): stack the two rotated parts on a new LAST axis (dim=-1) before "
                "flattening, so that features 2i and 2i+1 sit side by side again.",
                _rope("a * sin + b * cos], dim=-1).flatten(-2)", "a * sin + b * cos], dim=-2).flatten(-2)")),
        Mistake("exponent_i", "the frequencies use the pair index i instead of 2i: θ_i = 10000^(-2i/d), so the "
                "exponents are 0, -2/d, -4/d, ...",
                _rope("torch.arange(0, d, 2, device=x.device, dtype=work) / d",
                      "torch.arange(d // 2, device=x.device, dtype=work) / d")),
        Mistake("wrong_base", "the angle multiplies by 10000^(2i/d) instead of dividing: θ_i = 10000^(-2i/d) "
                "gets smaller for later pairs.",
                _rope("10000 ** (-torch.arange", "10000 ** (torch.arange")),
        Mistake("clockwise", "the pairs turn the wrong way: rotating (a, b) by +angle gives "
                "(a·cos − b·sin, a·sin + b·cos).",
                _rope("[a * cos - b * sin, a * sin + b * cos]", "[a * cos + b * sin, -a * sin + b * cos]")),
        Mistake("positions_fixed_device", "the positions are created on the CPU.",
                _rope("torch.arange(offset, offset + T, device=x.device, dtype=work)",
                      "torch.arange(offset, offset + T, dtype=work)"),
                shows="a tensor is created on a fixed device", cause="fixed_device"),
        Mistake("offset_ignored", "the offset is ignored: the rows of x sit at positions offset, offset + 1, ..., "
                "offset + T - 1 (a cached token is not at position 0), so position t = offset + its row index.",
                _rope("torch.arange(offset, offset + T, device=x.device, dtype=work)",
                      "torch.arange(T, device=x.device, dtype=work)")),
        Mistake("offset_negated", "the offset is subtracted: the rows come after the offset positions already "
                "seen, at offset, offset + 1, ..., offset + T - 1.",
                _rope("torch.arange(offset, offset + T, device=x.device, dtype=work)",
                      "torch.arange(-offset, -offset + T, device=x.device, dtype=work)")),
        Mistake("offset_on_angle", "the offset is added to the angles (offset radians for every pair) instead of "
                "to the positions: pair i of position t turns by t·θ_i with t = offset + row, so the offset is "
                "multiplied by θ_i too.",
                _rope("angle = pos[:, None] * theta[None, :]",
                      "angle = (pos[:, None] - offset) * theta[None, :] + offset")),
    ],
    variants=[
        Variant("complex", '''
def apply_rope(x, offset=0):
    T, d = x.shape[-2:]
    work = torch.promote_types(x.dtype, torch.float32)
    pos = offset + torch.arange(T, device=x.device, dtype=work)
    theta = 1.0 / 10000 ** (torch.arange(0, d, 2, device=x.device, dtype=work) / d)
    angle = torch.outer(pos, theta)                                     # (T, d/2)
    rot = torch.polar(torch.ones_like(angle), angle)                    # e^{i·angle}
    xc = torch.view_as_complex(x.to(work).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)
'''),
        Variant("matrices", '''
def apply_rope(x, offset=0):
    T, d = x.shape[-2:]
    work = torch.promote_types(x.dtype, torch.float32)
    angle = torch.arange(offset, T + offset, device=x.device, dtype=work)[:, None] * torch.pow(
        10000.0, -torch.arange(0, d, 2, device=x.device, dtype=work) / d)   # (T, d/2)
    c, s = angle.cos(), angle.sin()
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2).to(x.dtype)   # (T, d/2, 2, 2)
    pairs = x.unflatten(-1, (d // 2, 2))                                 # (..., T, d/2, 2)
    return (R @ pairs.unsqueeze(-1)).squeeze(-1).flatten(-2)
'''),
    ],
    cases=[
        Case("unbatched", "a (T=6, d=8) input", args=lambda g: (torch.randn(6, 8, generator=g),)),
        Case("heads", "a (B=2, h=3, T=5, d=16) input", args=lambda g: (torch.randn(2, 3, 5, 16, generator=g),)),
        Case("float64", "float64, (2, 7, 8)", dtype="float64", args=lambda g: (torch.randn(2, 7, 8, generator=g),)),
        Case("bfloat16", "bfloat16, (2, 4, 8)", dtype="bfloat16", args=lambda g: (torch.randn(2, 4, 8, generator=g),)),
        Case("best_device", "on the best device (CUDA when present), (2, 2, 6, 8)", device="best",
             args=lambda g: (torch.randn(2, 2, 6, 8, generator=g),)),
        Case("meta", "on the meta device, (2, 5, 8)", device="meta", args=lambda g: (torch.randn(2, 5, 8, generator=g),)),
        Case("offset", "rows at positions 5 to 8 (offset=5), (2, 3, 4, 8)", kwargs={"offset": 5},
             args=lambda g: (torch.randn(2, 3, 4, 8, generator=g),), seed=7),
        Case("offset_one_row", "one row at position 11 (offset=11), (2, 1, 16), float64", kwargs={"offset": 11},
             dtype="float64", numerics=True, args=lambda g: (torch.randn(2, 1, 16, generator=g),), seed=8),
    ],
)


def _query_key_rows(g, T=9, d=8):
    """(2, T, d): one query vector repeated at every position, then one key vector (see attncourse.properties)."""
    q, k = torch.randn(d, generator=g), torch.randn(d, generator=g)
    return (torch.stack([q.expand(T, d), k.expand(T, d)]),)


ROPE.cases += [
    Case("properties", "norms kept and q·k depending on m − n only (float64)", kind="property", dtype="float64",
         numerics=True,
         labels=["norms", "relative", "moves"], args=_query_key_rows, seed=5),
    Case("properties_best", "norms kept and q·k depending on m − n only (best device)", kind="property",
         device="best", labels=["norms", "relative", "moves"], args=lambda g: _query_key_rows(g, T=12, d=16), seed=6),
]


# ---------------------------------------------------------------- predict, then measure: a pair's wavelength
WAVE_REF = CELLS["wavelength"]

WAVELENGTH = Exercise(
    name="predicted_wavelength",
    cell="wavelength",
    reference=WAVE_REF,
    mistakes=[
        Mistake("no_two_pi", "that is 1/ω_i, the number of positions per radian: one full turn is 2π radians, so "
                "the wavelength is 2π / ω_i = 2π · 10000^(2i/d_model).",
                patch(WAVE_REF, "2 * math.pi * ", "")),
        Mistake("pair_index", "the exponent uses the pair index i instead of 2i: pair 16 divides by "
                "10000^(2·16/64), not 10000^(16/64).",
                patch(WAVE_REF, "10000 ** (2 * 16 / 64)", "10000 ** (16 / 64)")),
        Mistake("feature_as_i", "the feature index 32 was used as the pair index: features 32 and 33 are pair "
                "i = 16, whose exponent is 2i/d_model = 32/64.",
                patch(WAVE_REF, "10000 ** (2 * 16 / 64)", "10000 ** (2 * 32 / 64)")),
        Mistake("frequency", "that is a frequency (turns per position), not a wavelength: the wavelength is the "
                "number of positions per turn, 2π · 10000^(2i/d_model).",
                patch(WAVE_REF, "2 * math.pi * 10000 ** (2 * 16 / 64)", "1 / (2 * math.pi * 10000 ** (2 * 16 / 64))")),
    ],
    variants=[Variant("literal", "predicted_wavelength = 628.3"),
              Variant("radians", "omega = 1 / 100\npredicted_wavelength = 2 * math.pi / omega")],
    cases=[Case("value", "the wavelength of pair 16 of a 64-wide sinusoidal encoding", kind="value", api="any",
                atol=0.0, rtol=0.01,
                hint="Pair i turns by ω_i = 1 / 10000^(2i/d_model) per position; one full turn is 2π, so the "
                     "wavelength is 2π · 10000^(2i/d_model) = 2π · 10000^(32/64).",
                mistake_values={
                    "half_turn": ("that is half a turn: sin comes back to 0 after π, but to where it started "
                                  "(0, rising) only after 2π.", math.pi * 100),
                    "degrees": ("the angle is in radians: one turn is 2π, not 360.", 360 * 100.0),
                })],
)

# ---------------------------------------------------------------- find the bug: RoPE, rotate-half layout
HALF_REF = CELLS["rope_rotate_half"]


def _half(*pairs):
    return patch(HALF_REF, *pairs)


ROPE_HALF = Exercise(
    name="rope_rotate_half",
    cell="rope_rotate_half",
    reference=HALF_REF,
    handout="freq_index",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("freq_index", "pair 0 (features 0 and d/2) turns by the right angle, but every later pair turns "
                "faster than the docstring's t · 10000^(−2j/d), the more so the larger j (measure the angle each "
                "pair turns by from position 0 to position 1).",
                _half("10000 ** (2 * torch.arange(half, device=x.device, dtype=fp) / d)   # (d/2,)",
                      "10000 ** (torch.arange(half, device=x.device, dtype=fp) / d)       # (d/2,)")),
        Mistake("sin_cos_swapped", "sin and cos are swapped: a pair (a, b) turned by the angle φ becomes "
                "(a·cos φ − b·sin φ, a·sin φ + b·cos φ), so x itself is multiplied by cos.",
                _half("return x * cos + torch.cat([-x2, x1], dim=-1) * sin",
                      "return x * sin + torch.cat([-x2, x1], dim=-1) * cos")),
        Mistake("clockwise", "the pairs turn the wrong way: the rotated partner of (x1, x2) is (−x2, x1), which "
                "gives (a·cos − b·sin, a·sin + b·cos).",
                _half("torch.cat([-x2, x1], dim=-1)", "torch.cat([x2, -x1], dim=-1)")),
        Mistake("interleaved_angles", "the angles are repeated per interleaved pair (repeat_interleave): in the "
                "rotate-half layout feature j and feature j + d/2 share angle j, so the (T, d/2) angles are "
                "repeated as two halves.",
                _half("cos = angles.cos().repeat(1, 2)", "cos = angles.cos().repeat_interleave(2, dim=-1)",
                      "sin = angles.sin().repeat(1, 2)", "sin = angles.sin().repeat_interleave(2, dim=-1)")),
        Mistake("positions_from_1", "the positions start at 1: the first token is position 0 and is not rotated.",
                _half("torch.arange(T, device=x.device, dtype=fp)", "torch.arange(1, T + 1, device=x.device, dtype=fp)")),
    ],
    variants=[
        Variant("halves", '''
def rope_rotate_half(x):
    T, d = x.shape[-2:]
    h = d // 2
    work = torch.promote_types(x.dtype, torch.float32)
    theta = torch.pow(10000.0, -torch.arange(0, d, 2, device=x.device, dtype=work) / d)     # (d/2,)
    ang = torch.arange(T, device=x.device, dtype=work)[:, None] * theta                    # (T, d/2)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
'''),
        Variant("complex", '''
def rope_rotate_half(x):
    T, d = x.shape[-2:]
    h = d // 2
    work = torch.promote_types(x.dtype, torch.float32)
    ang = torch.arange(T, device=x.device, dtype=work)[:, None] * 10000 ** (
        -torch.arange(0, d, 2, device=x.device, dtype=work) / d)                           # (T, d/2)
    z = torch.complex(x[..., :h].to(work), x[..., h:].to(work)) * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
'''),
    ],
    cases=[
        Case("unbatched", "a (T=6, d=8) input", args=lambda g: (torch.randn(6, 8, generator=g),), seed=11),
        Case("heads", "a (B=2, h=3, T=5, d=16) input", args=lambda g: (torch.randn(2, 3, 5, 16, generator=g),),
             seed=12),
        Case("float64", "float64, (2, 7, 8)", dtype="float64", args=lambda g: (torch.randn(2, 7, 8, generator=g),),
             seed=13),
        Case("bfloat16", "bfloat16, (2, 4, 8)", dtype="bfloat16", args=lambda g: (torch.randn(2, 4, 8, generator=g),),
             seed=14),
        Case("best_device", "on the best device (CUDA when present), (2, 2, 6, 8)", device="best",
             args=lambda g: (torch.randn(2, 2, 6, 8, generator=g),), seed=15),
        Case("meta", "on the meta device, (2, 5, 8)", device="meta", args=lambda g: (torch.randn(2, 5, 8, generator=g),)),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "positional_encoding": {"table_5x8": 1, "one_position": 1, "d6": 1, "long": 1},
    "predicted_wavelength": {"value": 2},
    "apply_rope": {"unbatched": 2.25, "heads": 2.25, "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125,
                   "meta": 0.125, "properties": 1.875, "properties_best": 0.125, "offset": 1, "offset_one_row": 1},
    "rope_rotate_half": {"unbatched": 1.25, "heads": 1.25, "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125,
                         "meta": 0.125},
}

SECTION = Section("05_positional_encoding", [PE, WAVELENGTH, ROPE, ROPE_HALF], points=POINTS)
