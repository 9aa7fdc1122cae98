"""No notebook a student gets hands out the answer to an exercise, of its own section or any other.

nbgrader strips a section's solutions from that section's release (test_repo checks it), but nothing
stops a later section from giving an earlier section's answer away as given code or a worked example
(06 once shipped section 04's complete ``MultiHeadAttention`` as a locked given cell).  This test compares
every *solution line* with every line of every handed-out notebook.

Solution lines: the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` in
``source/*/*.ipynb`` (a solution cell without markers counts whole), plus the ``reference`` code of every
exercise in ``graders/s*.py`` (only the lines inside the markers when it has them).

Handed-out notebooks: ``release/*/*.ipynb`` and ``notebooks/*/*.ipynb``, every cell.

Lines are compared *normalised*: a code line loses its trailing comment, and all whitespace is dropped,
so re-aligning or re-commenting a copied line does not hide it; a solution line leaks when its normalised
form occurs inside a normalised handed-out line.

A solution line is *trivial*, and not checked, when
* it is empty, a comment, or an nbgrader marker once normalised;
* it is an import (``import x``, ``from x import y``);
* it has fewer than ``MIN_CHARS`` (25) non-space characters once normalised: ``return x``,
  ``super().__init__()``, ``def forward(self, x):``, ``B, T, D = x.shape``, ``x = x + self.ffn(h)``
  are spelled the same by anyone who writes the code, so they give nothing away;
* its own section's release shows it anyway (a signature line outside the markers, given or locked code,
  a worked example, or a code span of the prose such as a contract's
  ``self.qkv = nn.Linear(d_model, 3 * d_model)``): the section hands it out itself, so it is no secret.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
MIN_CHARS = 25
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` inside a string literal is kept)."""
    quote, i = None, 0
    while i < len(line):
        if quote:
            if line[i] == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
        elif line[i] == "#":
            return line[:i]
        elif line.startswith(('"""', "'''"), i):
            quote = line[i:i + 3]
            i += 3
            continue
        elif line[i] in "'\"":
            quote = line[i]
        i += 1
    return line


def normalise(line: str, code: bool = True) -> str:
    """The form lines are compared in: no trailing comment (code only), no whitespace at all."""
    return "".join((_strip_comment(line) if code else line).split())


def is_trivial(line: str) -> bool:
    s = line.strip()
    if s.startswith(("import ", "from ")) and "import " in s:
        return True
    return len(normalise(s)) < MIN_CHARS


def _marked(text: str, whole: bool) -> list[str]:
    """The lines between the solution markers of ``text``; all of it if it has none and ``whole``."""
    if BEGIN not in text:
        return text.splitlines() if whole else []
    out, inside = [], False
    for line in text.splitlines():
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        elif inside:
            out.append(line)
    return out


def notebook_solution_lines(nb) -> list[str]:
    out = []
    for cell in nb.cells:
        whole = bool(cell.metadata.get("nbgrader", {}).get("solution"))
        out += _marked(cell.source, whole)
    return out


def reference_solution_lines(section: str) -> list[str]:
    from graders import available_sections, load_section

    if section not in available_sections():
        return []
    return [line for ex in load_section(section).exercises if ex.reference
            for line in _marked(ex.reference, whole=True)]


def handed_out_lines(nb) -> set[str]:
    return {normalise(line, code=cell.cell_type == "code") for cell in nb.cells for line in cell.source.splitlines()}


def _shown(norm: str, lines: set[str]) -> bool:
    return any(norm in line for line in lines)


def secrets(solution_lines, own_release) -> dict[str, str]:
    """Normalised form -> original line, for the non-trivial solution lines the own release does not show."""
    own = handed_out_lines(own_release)
    out = {}
    for line in solution_lines:
        norm = normalise(line)
        if norm and not is_trivial(line) and not _shown(norm, own):
            out.setdefault(norm, line.strip())
    return out


def find_leaks(secrets_by_section: dict, handed_out: dict) -> list[tuple[str, str, str]]:
    """(handed-out notebook, section whose answer it is, the solution line) for every leaked line."""
    leaks = []
    for where, nb in handed_out.items():
        lines = handed_out_lines(nb)
        for section, found in secrets_by_section.items():
            leaks += [(where, section, line) for norm, line in found.items() if _shown(norm, lines)]
    return leaks


def _read(path: Path):
    return nbformat.read(str(path), as_version=4)


def _sections():
    return sorted(p.name for p in (ROOT / "source").iterdir() if (p / f"{p.name}.ipynb").is_file())


def course_secrets() -> dict:
    out = {}
    for s in _sections():
        lines = notebook_solution_lines(_read(ROOT / "source" / s / f"{s}.ipynb")) + reference_solution_lines(s)
        out[s] = secrets(lines, _read(ROOT / "release" / s / f"{s}.ipynb"))
    return out


def course_handed_out() -> dict:
    return {str(p.relative_to(ROOT)): _read(p)
            for folder in ("release", "notebooks") for p in sorted((ROOT / folder).glob("*/*.ipynb"))}


# ------------------------------------------------------------------------------------------------ the course


def test_no_solution_line_is_handed_out():
    secrets_by_section = course_secrets()
    assert all(secrets_by_section.values()), "a section has no solution lines: is the parser still right?"
    leaks = find_leaks(secrets_by_section, course_handed_out())
    assert not leaks, "solution lines in handed-out notebooks:\n" + "\n".join(
        f"  {where}: {line!r} (a solution line of {section})" for where, section, line in leaks)


# ------------------------------------------------------------------------------------------- the detection


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, text in cells:
        nb.cells.append(nbformat.v4.new_markdown_cell(text) if kind == "md" else nbformat.v4.new_code_cell(text))
    return nb


SOURCE = _nb(("md", "Contract: `self.proj = nn.Linear(d_model, 3 * d_model)`."), ("code", f'''
class Net(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        {BEGIN}
        self.proj = nn.Linear(d_model, 3 * d_model)   # given by the contract
        self.scale = 1 / math.sqrt(d_model // 4)      # a secret
        {END}

    def forward(self, x):
        {BEGIN}
        import numpy as np
        scores = x @ x.transpose(-2, -1) * self.scale
        return x
        {END}
'''))
OWN_RELEASE = _nb(("md", "Contract: `self.proj = nn.Linear(d_model, 3 * d_model)`."),
                  ("code", "class Net(nn.Module):\n    def __init__(self, d_model):\n        # YOUR CODE HERE\n"))


def test_detection_flags_copied_lines_whatever_their_spacing_and_comments():
    found = {"01": secrets(notebook_solution_lines(SOURCE), OWN_RELEASE)}
    assert sorted(found["01"].values()) == ["scores = x @ x.transpose(-2, -1) * self.scale",
                                            "self.scale = 1 / math.sqrt(d_model // 4)      # a secret"]
    later = _nb(("code", "# Given: the net of section 01\n"
                         "scores = x@x.transpose(-2,-1)*self.scale  # copied, re-spaced\n"
                         "self.proj = nn.Linear(d_model, 3 * d_model)\nreturn x\nimport numpy as np"),
                ("md", "It computes `y = 1 / math.sqrt(d_model // 4)` first."))
    leaks = find_leaks(found, {"release/02/02.ipynb": later})
    assert sorted(line for _, _, line in leaks) == ["scores = x @ x.transpose(-2, -1) * self.scale"]
    assert find_leaks(found, {"release/02/02.ipynb": _nb(("code", "x = 1  # scores = x @ x.transpose(-2, -1) * "
                                                                   "self.scale"))}) == []


def test_detection_reads_markers_and_comments_correctly():
    assert normalise('s = s.masked_fill(m, float("-inf"))   # (B, T, T)') == 's=s.masked_fill(m,float("-inf"))'
    assert normalise("print('#', x)  # show") == "print('#',x)"
    assert normalise('"""a docstring # with a hash"""') == '"""adocstring#withahash"""'
    assert is_trivial("        super().__init__()") and is_trivial("from torch import nn  # the layers")
    assert not is_trivial("q, k, v = self.qkv(x).chunk(3, dim=-1)")
    whole = nbformat.v4.new_code_cell("answer = compute_the_answer(1, 2)")
    whole.metadata["nbgrader"] = {"solution": True, "grade_id": "a"}
    nb = _nb()
    nb.cells.append(whole)
    assert notebook_solution_lines(nb) == ["answer = compute_the_answer(1, 2)"]


def test_detection_catches_section_04s_module_given_in_06():
    """The leak this test was written for: 06's release with section 04's reference module as its given cell."""
    from graders.s04_multi_head import MHA_REF

    old_given = "\n".join(line for line in MHA_REF.splitlines() if "### " not in line)
    release = _read(ROOT / "release" / "06_transformer_block" / "06_transformer_block.ipynb")
    release.cells.append(nbformat.v4.new_code_cell(old_given))
    secrets_04 = {"04_multi_head": course_secrets()["04_multi_head"]}
    leaked = {normalise(line) for _, _, line in find_leaks(secrets_04, {"release/06": release})}
    assert normalise("q, k, v = self.qkv(x).chunk(3, dim=-1)") in leaked
    assert len(leaked) >= 6, leaked


def test_06s_given_attention_keeps_section_04s_contract():
    """06's given MultiHeadAttention, written another way, still computes what section 04's reference does."""
    import torch

    from graders.s04_multi_head import MHA_REF, causal_mask_input, random_mask_input, padding_mask_input, mha_params_input
    from graders.s06_transformer_block import MHA_GIVEN
    from graders.spec import PRELUDE

    def module(code):
        ns = {}
        exec(PRELUDE + code, ns)
        return ns["MultiHeadAttention"]

    ref_cls, given_cls = module(MHA_REF), module(MHA_GIVEN)
    g = torch.Generator().manual_seed(0)
    for mask in [None, causal_mask_input(), padding_mask_input(), random_mask_input(g), causal_mask_input().int()]:
        params, x = mha_params_input(g), torch.randn(2, 5, 16, generator=g, dtype=torch.float64)
        ref, given = ref_cls(16, 4).double(), given_cls(16, 4).double()
        for m in (ref, given):
            m.load_state_dict({k: v.double() for k, v in params.items()})
        with torch.no_grad():
            torch.testing.assert_close(given(x, mask), ref(x, mask), atol=1e-12, rtol=1e-12)
    assert (given.n_heads, given.d_k) == (ref.n_heads, ref.d_k)
    assert [n for n, _ in given.named_parameters()] == [n for n, _ in ref.named_parameters()]
    with torch.no_grad():
        assert given_cls(16, 4).bfloat16()(torch.randn(2, 5, 16).bfloat16(), padding_mask_input()).dtype == torch.bfloat16
        y = given_cls(16, 4).to("meta")(torch.randn(2, 5, 16, device="meta"), causal_mask_input().to("meta"))
    assert y.shape == (2, 5, 16) and y.device.type == "meta"
