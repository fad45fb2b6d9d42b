#!/usr/bin/env python3
"""Writes the README's model table from the test suite, so that it says
what the tests check and nothing else.

For every model fixture (test/fixtures, traced at build time), and every
model a test traces itself with a script of its own (SCRIPTED: the speech,
language, mixture-of-experts and vision models under test/e2e), the table
gives its parameter count and op kinds (from `merak-opt
--merak-model-summary` on the traced archive; a scripted model is traced
into a temporary directory for it), and what
the lit tests under test/ do with it, read from their RUN lines: which
optimizers and precisions train it, and under which plans
(`--merak-parallelize` options, pipeline schedules) a run of it is compared
with PyTorch; "also" lists the precisions besides float32, and LoRA
(`--merak-lora`), that such a run uses. A run counts when a `merak-exec`
log of the model's step is compared (`compare_losses.py`, not under
`not`) with a log written by `reference.py`, or with a log that is itself
compared with one, in the same test file.

Usage:
  model_zoo.py --merak-opt BIN --fixtures DIR [--tests DIR] [--readme FILE]
               (--write | --check)

--write replaces the lines between `<!-- model-zoo:begin -->` and
`<!-- model-zoo:end -->` in the README; --check exits 1, printing the
difference and the command that rewrites it, when they differ.
"""

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile

BEGIN = "<!-- model-zoo:begin -->"
END = "<!-- model-zoo:end -->"

# What each fixture is and exercises: facts of the model, not of the tests.
MODELS = {
    "gpt2": ("GPT-2 style", "in-tree",
             "learned positions, tied LM head, causal mask buffer, loss"),
    "llama": ("LLaMA style", "in-tree",
              "RMSNorm from pow/mean/rsqrt, rotary embeddings, SwiGLU, "
              "grouped-query attention"),
    "bert": ("BERT style", "in-tree",
             "token types, padding mask, MLM head, `ignore_index`"),
    "t5": ("T5 style", "in-tree",
           "encoder-decoder, relative position buckets, cross-attention"),
    "resnet18": ("ResNet-18", "torchvision",
                 "batch norm in training mode; running statistics become "
                 "buffer updates"),
    "vit_b_16": ("ViT-B/16", "torchvision", "32×32 images"),
    "swin_t": ("Swin-T", "torchvision",
               "shifted windows: `roll`, padding, constant attention masks"),
    "convnext_tiny": ("ConvNeXt-T", "torchvision",
                      "depthwise convolutions, layer scale"),
}


# Models a test traces itself: `%python %S/Inputs/SCRIPT.py ARG
# ARCHIVE.pt BATCHES.safetensors STEPS` in a RUN line, the archive then
# compiled by merak-opt. Each entry: the script under test/, its model
# argument, and the same facts as MODELS gives.
SCRIPTED = {
    "wav2vec2": ("e2e/audio/Inputs/speech_model.py", "wav2vec2",
                 "Wav2Vec2 (large LV-60 layout)", "torchaudio",
                 "toy size, keyword-classification head; weight norm, 1-D "
                 "convolutions, a layer norm per feature convolution"),
    "hubert": ("e2e/audio/Inputs/speech_model.py", "hubert",
               "HuBERT (base layout)", "torchaudio",
               "toy size, keyword-classification head; weight norm, 1-D "
               "convolutions, group norm, post-norm layers"),
    "opt": ("e2e/models/Inputs/language_models.py", "opt", "OPT style",
            "in-tree",
            "positions from the attention mask (offset 2), pre-LN, ReLU MLP, "
            "tied LM head, scaled query"),
    "gptj": ("e2e/models/Inputs/language_models.py", "gptj",
             "GPT-J style", "in-tree",
             "parallel attention and MLP on one layer norm, interleaved "
             "partial rotary embedding, written-out tanh GELU, untied LM "
             "head with bias"),
    "bart": ("e2e/models/Inputs/language_models.py", "bart", "BART style",
             "in-tree",
             "encoder-decoder, learned positions (offset 2), post-LN, "
             "padding and causal masks, cross-attention, tied LM head plus "
             "final_logits_bias"),
    "unet": ("e2e/models/Inputs/dense_models.py", "unet",
             "DDPM UNet", "in-tree",
             "noise prediction, sinusoidal timestep MLP, GroupNorm ResNet "
             "blocks, mid-resolution attention, nearest upsampling, "
             "concatenated skips, MSE loss"),
    "segformer": ("e2e/models/Inputs/dense_models.py", "segformer",
                  "SegFormer style", "in-tree",
                  "overlapping patch embeddings, spatial-reduction "
                  "attention, Mix-FFN (depthwise conv), bilinear all-MLP "
                  "decoder, per-pixel cross-entropy"),
    "clip": ("e2e/models/Inputs/vision_models.py", "clip", "CLIP style",
             "in-tree",
             "image and text towers, QuickGELU, end-of-text token by "
             "argmax, L2-normalised embeddings, learnable temperature, "
             "symmetric contrastive loss"),
    "deepseek": ("e2e/models/Inputs/moe_models.py", "deepseek",
                 "DeepSeek-V2 style MoE", "in-tree",
                 "multi-head latent attention, decoupled rotary key, dense "
                 "first layer, routed top-2 plus shared experts, capacity "
                 "dispatch, load-balancing loss"),
    "mixtral": ("e2e/models/Inputs/moe_models.py", "mixtral",
                "Mixtral style MoE", "in-tree",
                "grouped-query attention, rotary embeddings, top-2 router "
                "softmax, SwiGLU experts, capacity dispatch, balancing "
                "loss"),
    "dinov2": ("e2e/models/Inputs/vision_models.py", "dinov2",
               "DINOv2 style", "in-tree",
               "register tokens, LayerScale, SwiGLU MLP, fused q/k/v "
               "reshaped to five dimensions, class-token head"),
}


def run_lines(path):
    """The RUN lines of a lit test, continuations joined."""
    lines, current = [], None
    for raw in open(path, encoding="utf-8"):
        m = re.match(r"\s*(?://|#)?\s*RUN:\s?(.*)$", raw.rstrip("\n"))
        if not m:
            continue
        text = m.group(1)
        if current is not None:
            current += " " + text
        else:
            current = text
        if current.endswith("\\"):
            current = current[:-1]
            continue
        lines.append(current)
        current = None
    return lines


def commands(line):
    """The commands of a RUN line: (negated, words) per part of a pipeline
    or a `&&` chain."""
    try:
        words = shlex.split(line)
    except ValueError:
        return []
    out, part = [], []
    for w in words + ["|"]:
        if w in ("|", "&&", "||", ";"):
            if part:
                negated = part[0] == "not"
                while part and part[0] in ("not", "env") or (
                        part and re.match(r"^[A-Z_]+=", part[0])):
                    part = part[1:]
                if part:
                    out.append((negated, part))
            part = []
        elif w.startswith(">") or w.startswith("<") or w in ("2>&1",):
            part.append(None)
        else:
            part.append(w)
    # Drop redirection targets (the word after a bare > or <).
    cleaned = []
    for negated, part in out:
        words, skip = [], False
        for w in part:
            if skip:
                skip = False
                continue
            if w is None:
                skip = True
                continue
            words.append(w)
        cleaned.append((negated, words))
    return cleaned


def option(words, name):
    """The value of `name=V` or `name V` in `words`, or None."""
    for i, w in enumerate(words):
        if w.startswith(name + "="):
            return w[len(name) + 1:]
        if w == name and i + 1 < len(words):
            return words[i + 1]
    return None


def plan_label(options):
    """A plan's name from the merak-opt options along its chain."""
    parts = []
    for key in ("--merak-parallelize", "--merak-pipeline-partition",
                "--merak-pipeline-schedule"):
        for value in options.get(key, []):
            value = value.strip()
            if key == "--merak-pipeline-schedule":
                kind = re.search(r"kind=(\S+)", value)
                parts.append(kind.group(1) if kind else value)
            elif value.startswith("auto"):
                # The search's own options (profile files, memory) are not
                # the plan it picks.
                devices = re.search(r"devices=\d+", value)
                parts.append("auto" + (" " + devices.group(0) if devices
                                       else ""))
            elif value:
                parts.append(value)
    return " ".join(parts) if parts else "one process"


def scan_tests(root):
    """{model: {"optimizers": set, "precisions": set, "plans": set}}."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(".test"):
                scan_file(os.path.join(directory, name), found, root)
    return found


def scripted_model(words, test, root):
    """The SCRIPTED model whose archive the command `words` (in the test
    file `test` under `root`) traces, and that archive; or None."""
    if len(words) < 4 or not words[1].endswith(".py"):
        return None
    script = words[1].replace("%S", os.path.dirname(test))
    script = os.path.relpath(script, root).replace(os.sep, "/")
    for key, entry in SCRIPTED.items():
        if entry[:2] == (script, words[2]):
            return key, words[3]
    return None


def scan_file(path, found, root):
    origin = {}    # a compiled file -> (model, {option: [values]})
    traced = {}    # an archive a SCRIPTED model was traced to -> model
    logs = {}      # a merak-exec log -> (model, options)
    references = set()
    comparisons = []
    for line in run_lines(path):
        for negated, words in commands(line):
            tool = os.path.basename(words[0])
            if tool == "merak-opt" and not negated:
                inputs = [w for w in words[1:] if not w.startswith("-")]
                out = option(words, "-o")
                if not inputs or not out:
                    continue
                source = inputs[0]
                m = re.match(r"%fixtures/(\w+)\.pt$", source)
                if m:
                    model, options = m.group(1), {}
                elif source in traced:
                    model, options = traced[source], {}
                elif source in origin:
                    model, options = origin[source]
                    options = {k: list(v) for k, v in options.items()}
                else:
                    continue
                for w in words[1:]:
                    if w.startswith("--merak-") and "=" in w:
                        key, value = w.split("=", 1)
                        options.setdefault(key, []).append(value)
                origin[out] = (model, options)
            elif tool == "merak-exec" and not negated and len(words) > 1:
                program = words[1]
                log = option(words, "--log-jsonl")
                if program in origin and log:
                    logs[log] = origin[program]
            elif tool.startswith("python") or tool == "%python":
                script = os.path.basename(words[1]) if len(words) > 1 else ""
                model = None if negated else scripted_model(words, path, root)
                if model:
                    traced[model[1]] = model[0]
                elif script == "reference.py" and not negated:
                    out = option(words, "--out-jsonl")
                    if out:
                        references.add(out)
                elif script == "compare_losses.py" and not negated:
                    files = [w for w in words[2:] if not w.startswith("-")]
                    if len(files) >= 2:
                        comparisons.append((files[0], files[1]))
    # Logs checked against PyTorch: directly, or through a checked log.
    checked = set(references)
    changed = True
    while changed:
        changed = False
        for a, b in comparisons:
            for x, y in ((a, b), (b, a)):
                if y in checked and x not in checked:
                    checked.add(x)
                    changed = True
    for log, (model, options) in logs.items():
        if log not in checked:
            continue
        entry = found.setdefault(model, {"optimizers": set(),
                                         "precisions": set(),
                                         "plans": set()})
        for train in options.get("--merak-train", []):
            opt = re.search(r"optimizer=(\w+)", train)
            entry["optimizers"].add(opt.group(1) if opt else "sgd")
            precision = re.search(r"precision=(\w+)", train)
            entry["precisions"].add(precision.group(1) if precision
                                    else "fp32")
        if options.get("--merak-lora"):
            entry["precisions"].add("LoRA")
        entry["plans"].add(plan_label(options))


def summary(merak_opt, archive):
    """(parameter elements, op kinds, ops) of a traced archive's forward."""
    done = subprocess.run([merak_opt, archive, "--merak-model-summary",
                           "-o", os.devnull], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("model_zoo.py: %s: %s" % (archive, done.stderr.strip()))
    params = re.search(r"parameter elements: (\d+)", done.stderr)
    ops = re.search(r"ops: (\d+)", done.stderr)
    kinds = re.findall(r"^\s+merak\.\w+\s+\d+$", done.stderr, re.M)
    return (int(params.group(1)) if params else 0, len(kinds),
            int(ops.group(1)) if ops else 0)


def scripted_summary(merak_opt, tests, key):
    """summary() of a SCRIPTED model, traced into a temporary directory."""
    script, argument = SCRIPTED[key][:2]
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, key + ".pt")
        done = subprocess.run(
            [sys.executable, os.path.join(tests, script), argument, archive,
             os.path.join(tmp, "batches.safetensors"), "1"],
            capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit("model_zoo.py: tracing %s with %s failed: %s"
                     % (key, script, done.stderr.strip()))
        return summary(merak_opt, archive)


def plan_key(plan):
    return (plan != "one process", plan)


def table(args):
    tested = scan_tests(args.tests)
    rows = ["| model | source | parameters | ops (kinds) | trained with | "
            "plans compared with PyTorch | notes |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    models = [(key, facts, False) for key, facts in MODELS.items()]
    models += [(key, entry[2:], True) for key, entry in SCRIPTED.items()]
    for key, (title, source, notes), scripted in models:
        if scripted:
            params, kinds, ops = scripted_summary(args.merak_opt, args.tests,
                                                  key)
        else:
            archive = os.path.join(args.fixtures, key + ".pt")
            if not os.path.exists(archive):
                sys.exit("model_zoo.py: no fixture %s (build the fixtures)"
                         % archive)
            params, kinds, ops = summary(args.merak_opt, archive)
        entry = tested.get(key)
        if entry:
            trained = ", ".join(sorted(entry["optimizers"]))
            precisions = sorted(entry["precisions"] - {"fp32"})
            if precisions:
                trained += " (also " + ", ".join(precisions) + ")"
            plans = "; ".join("`%s`" % p if p != "one process" else p
                              for p in sorted(entry["plans"], key=plan_key))
        else:
            trained, plans = "imported only", "none"
        rows.append("| %s | %s | %s | %d (%d) | %s | %s | %s |"
                    % (title, source, format(params, ","), ops, kinds,
                       trained, plans, notes))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--merak-opt", required=True)
    p.add_argument("--fixtures", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--tests", default=os.path.join(here, "..", "test"))
    p.add_argument("--readme", default=os.path.join(here, "..", "README.md"))
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = p.parse_args()
    text = open(args.readme, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        sys.exit("model_zoo.py: %s has no %s ... %s block"
                 % (args.readme, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    new = "\n" + "\n".join(table(args)) + "\n"
    if args.write:
        with open(args.readme, "w", encoding="utf-8") as f:
            f.write(head + BEGIN + new + END + tail)
        print("model_zoo.py: wrote the table of %d models to %s"
              % (len(MODELS) + len(SCRIPTED), args.readme))
        return 0
    if old == new:
        print("model_zoo.py: the README's model table matches the test suite")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), "README.md (now)",
        "README.md (from the tests)"))
    print("model_zoo.py: the README's model table differs from what the "
          "tests check; rewrite it with: python3 scripts/model_zoo.py "
          "--merak-opt build/bin/merak-opt --fixtures build/test/fixtures "
          "--write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
