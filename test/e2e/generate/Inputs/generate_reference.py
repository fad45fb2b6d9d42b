"""PyTorch's side of the text-generation tests.

  weights MODEL.pt --out W.safetensors [--sharpen K]
      The archive's parameters and buffers, with the final norm's gain
      multiplied by K, so that the logits of the fixtures' random weights
      are K times further apart and greedy choices are not decided by
      rounding.
  greedy --fixture NAME --weights W.safetensors --prompts P.txt
         --max-new-tokens N [--stop-tokens a,b]
      Greedy generation with the eager fixture model (test/fixtures), the
      whole sequence recomputed for every token (no cache): one line per
      prompt as `merak-exec --generate` prints them, then the smallest gap
      between the two largest logits of any choice.
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "fixtures"))
sys.dont_write_bytecode = True

import merak_safetensors  # noqa: E402
import models  # noqa: E402

# The final norm's gain (and bias): the logits scale with it, the rest of
# the model stays as it is.
HEADS = ("transformer.ln_f.weight", "transformer.ln_f.bias", "norm.weight")


def weights(args):
    module = torch.jit.load(args.model)
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    for name in HEADS:
        if name in state:
            state[name] = state[name] * args.sharpen
    merak_safetensors.save(state, args.out)


def greedy(args):
    torch.set_num_threads(1)
    build = {"gpt2": models.GPT2, "llama": models.Llama}[args.fixture]
    model = build()
    state = merak_safetensors.load(args.weights)[0]
    missing, unexpected = model.load_state_dict(
        {k: torch.as_tensor(v) for k, v in state.items()}, strict=False)
    if missing:
        sys.exit("generate_reference.py: %s lacks %s" % (args.weights, missing))
    model.eval()
    window = 16
    stops = [int(t) for t in args.stop_tokens.split(",") if t]
    smallest = float("inf")
    with open(args.prompts) as f:
        prompts = [[int(t) for t in line.split()] for line in f if line.split()]
    for i, prompt in enumerate(prompts):
        seq = list(prompt)
        out, finish = [], ""
        while not finish:
            if len(seq) == window:
                finish = "context"
                break
            idx = torch.tensor([seq])
            with torch.no_grad():
                logits, _ = model(idx, torch.zeros_like(idx))
            row = logits[0, -1]
            top2 = torch.topk(row, 2).values
            smallest = min(smallest, float(top2[0] - top2[1]))
            tok = int(torch.argmax(row))
            seq.append(tok)
            out.append(tok)
            if tok in stops:
                finish = "stop"
            elif len(out) == args.max_new_tokens:
                finish = "length"
        print("prompt %d (%s): %s" % (i + 1, finish,
                                      " ".join(str(t) for t in out)))
    print("smallest gap between the two likeliest tokens: %.3g" % smallest)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("weights")
    w.add_argument("model")
    w.add_argument("--out", required=True)
    w.add_argument("--sharpen", type=float, default=1.0)
    g = sub.add_parser("greedy")
    g.add_argument("--fixture", required=True)
    g.add_argument("--weights", required=True)
    g.add_argument("--prompts", required=True)
    g.add_argument("--max-new-tokens", type=int, required=True)
    g.add_argument("--stop-tokens", default="")
    args = p.parse_args()
    {"weights": weights, "greedy": greedy}[args.command](args)


if __name__ == "__main__":
    main()
