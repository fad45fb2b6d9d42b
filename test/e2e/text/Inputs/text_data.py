"""Text for the tokenizer tests: a corpus, a SentencePiece model trained on
it, the token files Python's SentencePiece makes of it, and the batches a
token file gives merak-exec --tokens.

Usage:
    text_data.py corpus DIR [--vocab V]    # DIR/corpus.txt, DIR/spm.model
    text_data.py expect DIR --validation F # DIR/expected.bin, expected.val.bin
    text_data.py batches TOKENS OUT --steps N --seed S --batch B --seq-len L

`expect` splits and encodes as merak-tokenize documents it: one document
per non-empty line, each followed by the end-of-sentence id, the last
ceil(F * documents) documents in the validation file, uint16 little-endian.
`batches` samples step s's windows as merak-exec --tokens does (a
generator seeded with step_seed(S, s, DATA), start offsets
torch.randint(len(tokens) - L, (B,))) and writes them as idx/targets
batches for reference.py.
"""

import argparse
import math
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "Runtime", "Inputs"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "python"))

WORDS = ("the a model trains on text and tokens flow through layers of "
         "attention while gradients return to every weight in turn so "
         "each step learns a little more about which word comes next "
         "pipelines split stages data splits batches tensors split "
         "heads").split()


def corpus(args):
    rng = random.Random(7)
    lines = []
    for i in range(400):
        n = rng.randint(4, 18)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(n)))
        if i % 37 == 0:
            lines.append("")  # empty lines are skipped
    path = os.path.join(args.dir, "corpus.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines))  # the last line has no newline
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        input=path, model_prefix=os.path.join(args.dir, "spm"),
        vocab_size=args.vocab, model_type="bpe", character_coverage=1.0,
        bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, num_threads=1,
        minloglevel=2)


def expect(args):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(
        model_file=os.path.join(args.dir, "spm.model"))
    with open(os.path.join(args.dir, "corpus.txt")) as f:
        docs = [line.rstrip("\r\n") for line in f]
    docs = [d for d in docs if d]
    held = math.ceil(args.validation * len(docs)) if args.validation else 0
    def ids(part):
        out = []
        for d in part:
            out += sp.encode(d) + [sp.eos_id()]
        return np.array(out, dtype="<u2")
    ids(docs[:len(docs) - held]).tofile(os.path.join(args.dir,
                                                     "expected.bin"))
    ids(docs[len(docs) - held:]).tofile(os.path.join(args.dir,
                                                     "expected.val.bin"))


def batches(args):
    import torch
    import merak_safetensors
    from seeds import DATA, step_seed
    tokens = torch.from_numpy(
        np.fromfile(args.tokens, dtype="<u2").astype(np.int64))
    idx, targets = [], []
    for step in range(1, args.steps + 1):
        g = torch.Generator().manual_seed(step_seed(args.seed, step, DATA))
        starts = torch.randint(len(tokens) - args.seq_len, (args.batch,),
                               generator=g)
        idx.append(torch.stack([tokens[s:s + args.seq_len] for s in starts]))
        targets.append(torch.stack(
            [tokens[s + 1:s + 1 + args.seq_len] for s in starts]))
    merak_safetensors.save({"idx": torch.stack(idx),
                            "targets": torch.stack(targets)}, args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["corpus", "expect", "batches"])
    parser.add_argument("dir")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--validation", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=16)
    args = parser.parse_args()
    if args.mode == "batches":
        args.tokens = args.dir
    {"corpus": corpus, "expect": expect, "batches": batches}[args.mode](args)


if __name__ == "__main__":
    main()
