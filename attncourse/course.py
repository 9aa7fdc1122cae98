"""The course's sections, in order: one nbgrader assignment each."""

SECTIONS = [
    "01_tokens",
    "02_qkv_by_hand",
    "03_masking",
    "04_multi_head",
    "05_positional_encoding",
    "06_transformer_block",
    "07_bert_probe",
]
