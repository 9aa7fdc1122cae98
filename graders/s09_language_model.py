"""Hidden cases for section 09: a character-level language model.

Six graded exercises: ``predicted_loss`` (predict, then measure), ``perplexity``, ``param_groups``,
``lr_at``, ``evaluate_loss`` (find the bug: the notebook hands out the ``train_mode`` mistake) and
``top_p_filter``.  Each code exercise has 4 known mistakes and 2 correct variants.

Three are graded through a probe of the notebook's locked ``given_probes`` cell (``Exercise.wrap``):

* ``decay_probe(param_groups)`` builds a fresh model (the given GPT, or a small nn.Sequential with an
  embedding, a LayerNorm and two linear layers), hands the student's groups to AdamW (which refuses a
  parameter listed twice) and reports each parameter's weight decay (-1: in no group).
* ``schedule_probe(lr_at)`` evaluates the schedule at every step of a stored list.
* ``eval_probe(evaluate_loss)`` builds a fresh GPT with dropout 0.5 in training mode, seeds the global
  generator (so a run with dropout left on is deterministic, and wrong) and reports the loss and whether
  the model is back in training mode.

``lr_at`` returns Python floats and has no dtype or device; ``param_groups`` has no dtype (AdamW's groups
are the same in any), so it is checked on the best device only.
"""

import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("09_language_model")   # the source notebook: solutions and given code are read from it

DATA_GIVEN = "from attncourse.teach.gpt import load_corpus\n\n" + CELLS["given_data"]
PROBES_GIVEN = ("from attncourse.teach.gpt import GPT\n\n" + CELLS["given_probes"])

V = 62   # the corpus's vocabulary

# ---------------------------------------------------------------- predicted_loss (predict, then measure)
PREDICT_REF = CELLS["predicted_loss"]

PREDICT = Exercise(
    name="predicted_loss",
    cell="predicted_loss",
    given=DATA_GIVEN,
    reference=PREDICT_REF,
    mistakes=[
        Mistake("log2", "that is log2 of the vocabulary size (bits): cross_entropy measures nats, the natural log "
                "(math.log).", "predicted_loss = math.log2(62)"),
        Mistake("log10", "that is log10 of the vocabulary size: cross_entropy uses the natural log (math.log).",
                "predicted_loss = math.log10(62)"),
        Mistake("vocab_size", "that is the vocabulary size itself, which is the untrained model's perplexity: the "
                "loss is its natural logarithm.", "predicted_loss = 62"),
        Mistake("probability", "that is the probability each character gets: the loss is -ln of it.",
                "predicted_loss = 1 / 62"),
    ],
    variants=[Variant("literal", "predicted_loss = 4.127"), Variant("minus_log", "predicted_loss = -math.log(1 / 62)")],
    cases=[Case("value", "the mean cross-entropy of the untrained model on the 62-character corpus", kind="value",
                api="any", atol=0.05,
                hint="equal logits give every one of the 62 characters probability 1/62, so the loss is "
                     "-ln(1/62) = ln 62 nats (the natural log: cross_entropy uses it)",
                mistake_values={"zero": ("an untrained model is not perfect: with equal logits each character gets "
                                          "probability 1/62.", 0.0)})],
)

# ---------------------------------------------------------------- perplexity
PPL_REF = CELLS["perplexity"]

PPL = Exercise(
    name="perplexity",
    cell="perplexity",
    reference=PPL_REF,
    mistakes=[
        Mistake("unweighted", "the per-batch losses are averaged as if every batch had as many targets: weight "
                "each batch's mean loss by its count (sum of loss x count, divided by the total count).",
                patch(PPL_REF, "(losses * counts).sum() / counts.sum()", "losses.mean()")),
        Mistake("mean_of_perplexities", "the perplexities of the batches are averaged: perplexity is the "
                "exponential of the mean loss over all targets (a geometric mean), not a mean of exponentials.",
                patch(PPL_REF, "mean = (losses * counts).sum() / counts.sum()     # () : nats per target over "
                      "everything\n    return torch.exp(mean)",
                      "return (torch.exp(losses) * counts).sum() / counts.sum()")),
        Mistake("base_2", "2 ** loss treats the loss as bits: cross_entropy measures nats (natural log), so "
                "perplexity is e ** loss (torch.exp).", patch(PPL_REF, "torch.exp(mean)", "2 ** mean")),
        Mistake("total_not_mean", "the exponential of the total loss: divide the summed loss by the number of "
                "targets first.", patch(PPL_REF, "(losses * counts).sum() / counts.sum()", "(losses * counts).sum()")),
    ],
    variants=[
        Variant("dot", '''
def perplexity(losses, counts):
    w = counts.to(losses.dtype)
    return torch.dot(losses, w).div(w.sum()).exp()
'''),
        Variant("log_space", '''
def perplexity(losses, counts):
    share = counts / counts.sum()
    return torch.exp(torch.sum(losses * share))
'''),
    ],
    cases=[],
)


def _losses(n, equal=False):
    def args(g):
        losses = 1.0 + 2.5 * torch.rand(n, generator=g)
        counts = torch.full((n,), 64) if equal else torch.randint(1, 200, (n,), generator=g)
        return (losses, counts)
    return args


PPL.cases = [
    Case("one_batch", "one batch of 64 targets", args=_losses(1, equal=True)),
    Case("unequal_batches", "3 batches of different sizes", args=_losses(3), seed=1),
    Case("many_batches", "20 batches of different sizes", args=_losses(20), seed=2),
    Case("float64", "float64, 5 batches", args=_losses(5), dtype="float64", seed=3),
    Case("best_device", "on the best device (CUDA when present), 4 batches", args=_losses(4), device="best", seed=4),
    Case("meta", "on the meta device", args=_losses(4), device="meta"),
]

# ---------------------------------------------------------------- param_groups
GROUPS_REF = CELLS["param_groups"]

GROUPS = Exercise(
    name="param_groups",
    cell="param_groups",
    given=PROBES_GIVEN,
    wrap="decay_probe",
    reference=GROUPS_REF,
    mistakes=[
        Mistake("dim_rule", "every matrix is decayed, the embedding (and the output head tied to it) too: a "
                "2-D shape is not the rule here; decay only nn.Linear weights that are not an embedding.",
                '''
def param_groups(model, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
'''),
        Mistake("biases_only", "only the biases are spared: LayerNorm weights and the embedding must not be "
                "decayed either; decay only nn.Linear weight matrices.",
                '''
def param_groups(model, weight_decay):
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    keep = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
'''),
        Mistake("tied_twice", "the tied matrix is in both groups (once as the head's weight, once as the "
                "embedding): list each parameter once, e.g. by going through model.parameters().",
                '''
def param_groups(model, weight_decay):
    decay, keep = [], []
    for m in model.modules():
        if isinstance(m, nn.Linear):
            decay.append(m.weight)
            if m.bias is not None:
                keep.append(m.bias)
        elif isinstance(m, (nn.Embedding, nn.LayerNorm)):
            keep.extend(m.parameters(recurse=False))
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
''', shows="some parameters appear in more than one parameter group"),
        Mistake("fixed_decay", "the weight_decay argument is ignored (a fixed 0.1 is used): put the value that "
                "is passed in into the decayed group.",
                patch(GROUPS_REF, '"weight_decay": weight_decay}', '"weight_decay": 0.1}')),
    ],
    variants=[
        Variant("by_module", '''
def param_groups(model, weight_decay):
    seen, decay, keep = set(), [], []
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if isinstance(module, nn.Linear) and name == "weight" and id(p) not in embedded:
                decay.append(p)
            else:
                keep.append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=keep, weight_decay=0.0)]
'''),
        Variant("ptr_sets", '''
def param_groups(model, weight_decay):
    lin = [m.weight for m in model.modules() if type(m) is nn.Linear]
    emb = [m.weight for m in model.modules() if type(m) is nn.Embedding]
    chosen = [p for p in lin if all(p is not e for e in emb)]
    rest = [p for p in model.parameters() if all(p is not c for c in chosen)]
    uniq = []
    for p in chosen:
        if all(p is not u for u in uniq):
            uniq.append(p)
    return [{"params": uniq, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
'''),
    ],
    cases=[],
)

_like = lambda g: torch.zeros(1)   # noqa: E731  (its device is the model's)
GROUPS.cases = [
    Case("gpt", "the given GPT, 2 blocks, weight_decay=0.1", args=lambda g: (_like(g), 0.1, 2, "gpt"), api="any"),
    Case("deeper", "the given GPT, 3 blocks, weight_decay=0.3", args=lambda g: (_like(g), 0.3, 3, "gpt"), api="any",
         seed=1),
    Case("mlp", "an untied model: embedding, LayerNorm, two linear layers; weight_decay=0.05",
         args=lambda g: (_like(g), 0.05, 0, "mlp"), api="any", seed=2),
    Case("best_device", "the given GPT on the best device (CUDA when present)",
         args=lambda g: (_like(g), 0.1, 2, "gpt"), api="any", device="best", seed=3),
]

# ---------------------------------------------------------------- lr_at
LR_REF = CELLS["lr_at"]

LR = Exercise(
    name="lr_at",
    cell="lr_at",
    given=PROBES_GIVEN,
    wrap="schedule_probe",
    reference=LR_REF,
    mistakes=[
        Mistake("warmup_from_zero", "the warm-up is off by one: step s must use max_lr * (s + 1) / warmup_steps, "
                "so that step 0 already learns and the last warm-up step reaches max_lr.",
                patch(LR_REF, "max_lr * (step + 1) / warmup_steps", "max_lr * step / warmup_steps")),
        Mistake("no_min_lr", "the cosine ends at 0, not at min_lr: scale it between min_lr and max_lr.",
                patch(LR_REF, "min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))",
                      "0.5 * max_lr * (1 + math.cos(math.pi * progress))")),
        Mistake("progress_from_zero", "the cosine's progress counts from step 0, not from the end of the warm-up: "
                "progress = (step - warmup_steps) / (total_steps - warmup_steps), so the cosine starts at max_lr.",
                patch(LR_REF, "(step - warmup_steps) / (total_steps - warmup_steps)", "step / total_steps")),
        Mistake("no_floor", "after total_steps the rate climbs back up the cosine: from total_steps on, return "
                "min_lr.", patch(LR_REF, "    if step >= total_steps:\n        return min_lr\n", "")),
    ],
    variants=[
        Variant("min_form", '''
def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step >= warmup_steps:
        t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr + (max_lr - min_lr) * (math.cos(math.pi * t) + 1) / 2
    return (step + 1) / warmup_steps * max_lr
'''),
        Variant("torch_cos", '''
def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step + 1 <= warmup_steps:
        return float(max_lr * (step + 1) / warmup_steps)
    t = torch.tensor(min(step, total_steps) - warmup_steps, dtype=torch.float64) / (total_steps - warmup_steps)
    return float(min_lr + (max_lr - min_lr) * 0.5 * (1 + torch.cos(torch.pi * t)))
'''),
    ],
    cases=[],
)

LR.cases = [
    Case("short", "steps 0-29, warm-up 5, total 25, max 1e-3, min 1e-4",
         args=lambda g: (list(range(30)), 1e-3, 5, 25, 1e-4), api="any"),
    Case("long_warmup", "steps 0-119, warm-up 40, total 100, max 3e-3, min 3e-4",
         args=lambda g: (list(range(120)), 3e-3, 40, 100, 3e-4), api="any", seed=1),
    Case("past_the_end", "steps 600-1000 after a 600-step schedule", args=lambda g: (list(range(590, 1001, 10)),
         6e-4, 60, 600, 6e-5), api="any", seed=2),
    Case("min_lr_zero", "steps 0-49, warm-up 10, total 50, min_lr 0", args=lambda g: (list(range(50)), 0.01, 10, 50,
         0.0), api="any", seed=3),
]

# ---------------------------------------------------------------- evaluate_loss (find the bug)
EVAL_REF = CELLS["evaluate_loss"]

EVAL = Exercise(
    name="evaluate_loss",
    cell="evaluate_loss",
    given=PROBES_GIVEN,
    wrap="eval_probe",
    reference=EVAL_REF,
    handout="train_mode",
    mistakes=[
        Mistake("train_mode", "the loss is measured in training mode: dropout still drops activations, so the "
                "number is random and too high; call model.eval() before measuring (and restore the mode after).",
                patch(EVAL_REF, "    model.eval()\n", "")),
        Mistake("mean_of_means", "the batches' mean losses are averaged as if every batch had as many targets: "
                "sum the loss over all targets and divide by their number.",
                patch(EVAL_REF, 'F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()',
                      "F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()",
                      "n += y.numel()", "n += 1")),
        Mistake("left_in_eval", "the model is left in eval mode: it came in training mode and must leave in it "
                "(model.train(was_training)), or the training that follows runs without dropout.",
                patch(EVAL_REF, "    model.train(was_training)\n", "")),
        Mistake("inputs_as_targets", "the loss compares the predictions with the inputs x: the targets are y, the "
                "inputs shifted by one.", patch(EVAL_REF, "y.flatten(), reduction", "x.flatten(), reduction")),
    ],
    variants=[
        Variant("concatenate", '''
def evaluate_loss(model, batches):
    mode = model.training
    model.train(False)
    with torch.inference_mode():
        logits = torch.cat([model(x).reshape(-1, model(x).shape[-1]) for x, _ in batches])
        targets = torch.cat([y.reshape(-1) for _, y in batches])
        loss = F.cross_entropy(logits, targets)
    model.train(mode)
    return float(loss)
'''),
        Variant("log_softmax", '''
def evaluate_loss(model, batches):
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            nll, count = torch.zeros(()), 0
            for x, y in batches:
                logp = model(x).log_softmax(dim=-1)
                nll = nll + -logp.gather(-1, y.unsqueeze(-1)).sum().cpu().double()
                count += y.numel()
    finally:
        if was:
            model.train()
    return (nll / count).item()
'''),
    ],
    cases=[],
)


def _batches(sizes, T=8):
    def args(g):
        xs = [torch.randint(0, 12, (b, T), generator=g) for b in sizes]
        ys = [torch.randint(0, 12, (b, T), generator=g) for b in sizes]
        return (torch.zeros(1), xs, ys)   # the first: the model's dtype and device
    return args


EVAL.cases = [
    Case("two_batches", "2 batches of 4 sequences of 8 tokens", args=_batches([4, 4]), api="any"),
    Case("unequal_batches", "batches of 5, 1 and 2 sequences", args=_batches([5, 1, 2]), api="any", seed=1),
    Case("one_batch", "one batch of 3 sequences of 12 tokens", args=_batches([3], T=12), api="any", seed=2),
    Case("float64", "a float64 model, batches of 2 and 6", args=_batches([2, 6]), dtype="float64", api="any",
         seed=3),
    Case("best_device", "on the best device (CUDA when present), batches of 3 and 1", args=_batches([3, 1]),
         device="best", api="any", seed=4),
]

# ---------------------------------------------------------------- top_p_filter
TOPP_REF = CELLS["top_p_filter"]

TOPP = Exercise(
    name="top_p_filter",
    cell="top_p_filter",
    reference=TOPP_REF,
    mistakes=[
        Mistake("drops_crossing", "the token at which the total reaches p is dropped: it belongs to the nucleus "
                "(keep a token while the probability BEFORE it is below p), so the most likely token always stays.",
                patch(TOPP_REF, "before >= p)", "probs.cumsum(dim=-1) >= p)")),
        Mistake("unsorted", "the probabilities are summed in vocabulary order: sort them from most to least "
                "likely first, then put the mask back in vocabulary order.",
                patch(TOPP_REF, "torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)",
                      "torch.softmax(logits, dim=-1), torch.arange(logits.shape[-1], device=logits.device)"
                      ".expand(logits.shape)")),
        Mistake("mask_in_sorted_order", "the mask is computed in sorted order but applied in vocabulary order: "
                "scatter it back through the sort's indices.",
                patch(TOPP_REF, "torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= p)",
                      "before >= p")),
        Mistake("fill_zero", "the removed logits are set to 0, which still has probability e^0 after the softmax: "
                "set them to -inf.", patch(TOPP_REF, 'float("-inf")', "0.0")),
    ],
    variants=[
        Variant("ascending", '''
def top_p_filter(logits, p):
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1)
    tail = probs.cumsum(dim=-1) <= 1 - p
    drop = tail.scatter(-1, order, tail)
    return logits.masked_fill(drop, -torch.inf)
'''),
        Variant("gather_threshold", '''
def top_p_filter(logits, p):
    probs = logits.softmax(-1)
    s, _ = probs.sort(-1, descending=True)
    ahead = torch.cat([torch.zeros_like(s[..., :1]), s.cumsum(-1)[..., :-1]], dim=-1)
    n_keep = (ahead < p).sum(-1, keepdim=True)
    cutoff = s.gather(-1, n_keep - 1)
    return torch.where(probs >= cutoff, logits, torch.full_like(logits, float("-inf")))
'''),
    ],
    cases=[],
)


def _topp(B=8, Vb=20, scale=2.0):
    return lambda g: (scale * torch.randn(B, Vb, generator=g),)


TOPP.cases = [
    Case("p_0.9", "8 rows of 20 logits, p=0.9", args=_topp(), kwargs={"p": 0.9}),
    Case("p_0.5", "8 rows of 20 logits, p=0.5", args=_topp(), kwargs={"p": 0.5}, seed=1),
    Case("tiny_p", "p=0.01: only the most likely token", args=_topp(), kwargs={"p": 0.01}, seed=2),
    Case("peaked", "sharp logits (scale 5), p=0.8", args=_topp(scale=5.0), kwargs={"p": 0.8}, seed=3),
    Case("float64", "float64, p=0.7", args=_topp(), kwargs={"p": 0.7}, dtype="float64", seed=4),
    Case("best_device", "on the best device (CUDA when present), p=0.9", args=_topp(), kwargs={"p": 0.9},
         device="best", seed=5),
    Case("meta", "on the meta device, p=0.9", args=_topp(), kwargs={"p": 0.9}, device="meta"),
]

SECTION = Section("09_language_model", [PREDICT, PPL, GROUPS, LR, EVAL, TOPP])
