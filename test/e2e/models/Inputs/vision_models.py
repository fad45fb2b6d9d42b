"""Two vision model families at toy sizes, written as plain PyTorch modules
in their reference implementations' layout:

vision_models.py clip|dinov2 MODEL.pt BATCHES.safetensors STEPS [BATCH]

- clip: CLIP's two towers. A ViT image encoder (convolutional patch
  embedding, class token, learned positions, a layer norm before the
  blocks, pre-norm blocks with nn.MultiheadAttention and QuickGELU, a final
  layer norm on the class token, a projection without bias) and a causal
  text transformer (token and position embeddings, final layer norm, the
  feature at the end-of-text token, the highest id of each sequence, picked
  with argmax, a projection). Both embeddings are L2-normalised; the logits
  are `logit_scale.exp() * img @ txt.T` with a learnable scale and the
  loss is the symmetric contrastive loss (targets arange(B)). The batches
  file holds `images` [STEPS, B, 3, 16, 16] and `text` [STEPS, B, 8].
- dinov2: DINOv2's ViT with a classification head. Patch embedding, class
  token and register tokens, learned positions (for the class token and the
  patches, not the registers), pre-norm blocks with a fused q/k/v
  projection, LayerScale on both residual branches and a SwiGLU MLP, a
  final layer norm, a linear head on the class token, cross-entropy. The
  batches file holds `images` [STEPS, B, 3, 16, 16] and `labels` [STEPS, B].

B = 4 unless given; the trace is at batch 4. Dropout is 0 throughout.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402

IMAGE, PATCH, CHANNELS = 16, 4, 3
VOCAB, CONTEXT = 100, 8
CLASSES = 10


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    """CLIP's block: pre-norm attention and MLP, an optional attention mask
    (the text tower's causal one)."""

    def __init__(self, width, heads, attn_mask=None):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, width * 4), QuickGELU(),
                                 nn.Linear(width * 4, width))
        self.ln_2 = nn.LayerNorm(width)
        self.attn_mask = attn_mask

    def attention(self, x):
        return self.attn(x, x, x, need_weights=False,
                         attn_mask=self.attn_mask)[0]

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width, layers, heads, attn_mask=None):
        super().__init__()
        self.resblocks = nn.Sequential(*[
            ResidualAttentionBlock(width, heads, attn_mask)
            for _ in range(layers)])

    def forward(self, x):
        return self.resblocks(x)


class VisionTransformer(nn.Module):
    def __init__(self, width, layers, heads, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(CHANNELS, width, PATCH, stride=PATCH,
                               bias=False)
        scale = width ** -0.5
        tokens = (IMAGE // PATCH) ** 2 + 1
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(
            scale * torch.randn(tokens, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x)                      # [B, W, g, g]
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = self.class_embedding + torch.zeros(
            x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding
        x = self.ln_pre(x)
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        return self.ln_post(x[:, 0, :]) @ self.proj


class CLIP(nn.Module):
    def __init__(self, embed_dim=32, width=32, layers=2, heads=4):
        super().__init__()
        self.visual = VisionTransformer(width, layers, heads, embed_dim)
        mask = torch.full((CONTEXT, CONTEXT), float("-inf")).triu_(1)
        self.transformer = Transformer(width, layers, heads, mask)
        self.token_embedding = nn.Embedding(VOCAB, width)
        self.positional_embedding = nn.Parameter(
            0.01 * torch.randn(CONTEXT, width))
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(
            width ** -0.5 * torch.randn(width, embed_dim))
        self.logit_scale = nn.Parameter(torch.tensor(1 / 0.07).log())

    def encode_text(self, text):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = self.ln_final(x)
        eot = x[torch.arange(x.shape[0]), text.argmax(dim=-1)]
        return eot @ self.text_projection

    def forward(self, images, text):
        img = self.visual(images)
        txt = self.encode_text(text)
        img = img / img.norm(dim=-1, keepdim=True)
        txt = txt / txt.norm(dim=-1, keepdim=True)
        logits = self.logit_scale.exp() * img @ txt.t()
        targets = torch.arange(logits.shape[0], device=logits.device)
        loss = (F.cross_entropy(logits, targets) +
                F.cross_entropy(logits.t(), targets)) / 2
        return logits, loss


class LayerScale(nn.Module):
    def __init__(self, dim, init=1e-1):
        super().__init__()
        self.gamma = nn.Parameter(init * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Attention(nn.Module):
    """DINOv2's attention: one fused q/k/v projection."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class SwiGLUFFN(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden)
        self.w3 = nn.Linear(hidden, dim)

    def forward(self, x):
        x1, x2 = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(x1) * x2)


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = SwiGLUFFN(dim, hidden)
        self.ls2 = LayerScale(dim)

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class DinoVisionTransformer(nn.Module):
    def __init__(self, dim=48, depth=2, heads=4, hidden=64, registers=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(CHANNELS, dim, PATCH, stride=PATCH)
        patches = (IMAGE // PATCH) ** 2
        self.cls_token = nn.Parameter(1e-2 * torch.randn(1, 1, dim))
        self.register_tokens = nn.Parameter(
            1e-2 * torch.randn(1, registers, dim))
        self.pos_embed = nn.Parameter(2e-2 * torch.randn(1, patches + 1, dim))
        self.blocks = nn.ModuleList(
            [Block(dim, heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, images, labels):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        B = x.shape[0]
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + self.pos_embed
        x = torch.cat([x[:, :1], self.register_tokens.expand(B, -1, -1),
                       x[:, 1:]], dim=1)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        logits = self.head(x[:, 0])
        return logits, F.cross_entropy(logits, labels)


def build(kind):
    return {"clip": CLIP, "dinov2": DinoVisionTransformer}[kind]()


def main():
    kind, model_path, batches_path = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    torch.manual_seed(0)
    model = build(kind).train()
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(steps, batch, CHANNELS, IMAGE, IMAGE, generator=gen)
    if kind == "clip":
        # Token ids below the end-of-text id, which ends each sequence at a
        # random length (argmax finds it); padding after it is 0.
        eot = VOCAB - 1
        text = torch.randint(1, eot, (steps, batch, CONTEXT), generator=gen)
        lengths = torch.randint(2, CONTEXT + 1, (steps, batch), generator=gen)
        pos = torch.arange(CONTEXT)
        text = torch.where(pos < lengths[..., None] - 1, text,
                           torch.zeros_like(text))
        text = torch.where(pos == lengths[..., None] - 1,
                           torch.full_like(text, eot), text)
        inputs = {"images": images, "text": text}
    else:
        labels = torch.randint(0, CLASSES, (steps, batch), generator=gen)
        inputs = {"images": images, "labels": labels}
    example = tuple(t[0, :4] for t in inputs.values())
    merak_trace.save(model, example, model_path)
    merak_safetensors.save(inputs, batches_path)
    params = sum(p.numel() for p in model.parameters())
    print("%s: %d parameters" % (kind, params))


if __name__ == "__main__":
    main()
