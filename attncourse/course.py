"""The course's sections and how a section is named on a command line (the environment nbgrader runs in is the
judge's: :mod:`judge.environment`)."""
from __future__ import annotations


SECTIONS = [
    "01_tokens",
    "02_qkv_by_hand",
    "03_masking",
    "04_multi_head",
    "05_positional_encoding",
    "06_transformer_block",
    "07_bert_probe",
    "08_train_and_generate",
    "09_language_model",
    "10_efficient_attention",
    "11_flash_attention_triton",
]

# What a section needs beyond every section's packages: a module that requirements.txt installs on some platforms
# only (Triton has wheels for Linux alone). Where it is missing, the section's tests skip, saying why.
NEEDS = {"11_flash_attention_triton": "triton"}

def resolve_section(name: str) -> str:
    """A section from a command line: its full name, or its number (``2``, ``02``) or a prefix of one name.

    Raises ValueError, whose message lists the sections, when ``name`` names none or several.
    """
    name = str(name).strip()
    if name in SECTIONS:
        return name
    key = name.zfill(2) if name.isdigit() else name
    match = [s for s in SECTIONS if s.startswith(key)]
    if len(match) != 1:
        raise ValueError(f"unknown section {name!r}; one of {', '.join(SECTIONS)}")
    return match[0]


def missing_requirement(section: str) -> str | None:
    """Why ``section`` cannot run here (a module it needs is not installed: :data:`NEEDS`), or None."""
    import importlib.util

    module = NEEDS.get(section)
    if module and importlib.util.find_spec(module) is None:
        return (f"{section} needs the package {module}, which is not installed here (requirements.txt installs it "
                "on Linux only: it has no wheels for macOS or Windows)")
    return None
