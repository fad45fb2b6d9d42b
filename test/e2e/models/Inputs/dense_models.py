"""Two dense-prediction vision models in plain PyTorch, at toy sizes,
traced as a user would.

dense_models.py unet|segformer MODEL.pt BATCHES.safetensors STEPS [BATCH]

- unet: a DDPM noise-prediction UNet: a sinusoidal timestep embedding
  (sin and cos of the timestep times constant frequencies) through a
  two-layer SiLU MLP, ResNet blocks (GroupNorm, SiLU, 3x3 conv, the
  timestep embedding added per channel), a strided-conv downsampling,
  two-head self-attention over the 8x8 pixels at the lowest resolution,
  nearest-neighbour upsampling (F.interpolate, scale factor 2) then a
  conv, skip connections joined by torch.cat, GroupNorm, SiLU and a conv
  out; the loss is the MSE between predicted and true noise;
- segformer: SegFormer's encoder and all-MLP decoder: overlapping patch
  embeddings (a conv with stride below its kernel, then LayerNorm over the
  tokens), efficient self-attention whose keys and values come from a
  strided conv over the token grid plus LayerNorm (spatial reduction),
  Mix-FFN (linear, a depthwise 3x3 conv over the token grid, GELU,
  linear), two stages at 8x8 and 4x4; the decode head projects each stage
  with a linear, resizes it to the first stage's grid with bilinear
  interpolation (align_corners=False), concatenates, fuses with a 1x1 conv
  and classifies every pixel; the loss is the per-pixel cross-entropy.

Every model returns (output, loss). The batches file holds, per step, the
forward's inputs: `noisy` [STEPS, B, 3, 16, 16], `timesteps` [STEPS, B]
and `noise` [STEPS, B, 3, 16, 16] for unet (noisy images from a linear
beta schedule over 1000 steps); `pixel_values` [STEPS, B, 3, 32, 32] and
`labels` [STEPS, B, 8, 8] (5 classes) for segformer. The unet sees a
new batch every step (images, noise and timesteps), the segformer one
batch repeated, so its loss falls as it learns it. B = 2 unless given;
the trace is at batch 2.
"""
import math
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

# ---------------------------------------------------------------------------
# UNet


class TimestepEmbedding(nn.Module):
    """sin/cos of t times geometric frequencies, then Linear-SiLU-Linear."""

    def __init__(self, channels, dim):
        super().__init__()
        half = channels // 2
        freqs = torch.exp(-math.log(10000.0) *
                          torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("freqs", freqs)
        self.linear_1 = nn.Linear(channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, t):
        args = t[:, None].float() * self.freqs[None, :]
        emb = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
        return self.linear_2(F.silu(self.linear_1(emb)))


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout, temb, groups=8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.shortcut = (nn.Conv2d(cin, cout, 1) if cin != cout
                         else nn.Identity())

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.shortcut(x) + h


class AttentionBlock(nn.Module):
    """GroupNorm, then multi-head attention over the flattened pixels."""

    def __init__(self, channels, heads, groups=8):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(channels // heads)
        self.group_norm = nn.GroupNorm(groups, channels)
        self.to_q = nn.Linear(channels, channels)
        self.to_k = nn.Linear(channels, channels)
        self.to_v = nn.Linear(channels, channels)
        self.to_out = nn.Linear(channels, channels)

    def forward(self, x):
        b, c, h, w = x.shape
        d = c // self.heads
        tokens = self.group_norm(x).view(b, c, h * w).transpose(1, 2)

        def split(t):
            return t.view(b, h * w, self.heads, d).transpose(1, 2)
        q = split(self.to_q(tokens))
        k = split(self.to_k(tokens))
        v = split(self.to_v(tokens))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        out = torch.matmul(scores.softmax(dim=-1), v)
        out = out.transpose(1, 2).reshape(b, h * w, c)
        out = self.to_out(out).transpose(1, 2).reshape(b, c, h, w)
        return x + out


class Upsample(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UNet(nn.Module):
    """Two resolutions (16x16 at 16 channels, 8x8 at 32), attention in the
    middle."""

    def __init__(self, in_channels=3, ch=16, temb=32):
        super().__init__()
        self.time_embedding = TimestepEmbedding(ch, temb)
        self.conv_in = nn.Conv2d(in_channels, ch, 3, padding=1)
        self.down0 = ResnetBlock(ch, ch, temb)
        self.downsample = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.down1 = ResnetBlock(ch, 2 * ch, temb)
        self.mid_block1 = ResnetBlock(2 * ch, 2 * ch, temb)
        self.mid_attn = AttentionBlock(2 * ch, heads=2)
        self.mid_block2 = ResnetBlock(2 * ch, 2 * ch, temb)
        self.up1 = ResnetBlock(4 * ch, 2 * ch, temb)
        self.upsample = Upsample(2 * ch)
        self.up0 = ResnetBlock(3 * ch, ch, temb)
        self.norm_out = nn.GroupNorm(8, ch)
        self.conv_out = nn.Conv2d(ch, in_channels, 3, padding=1)

    def forward(self, noisy, timesteps, noise):
        temb = self.time_embedding(timesteps)
        h = self.conv_in(noisy)
        skip0 = self.down0(h, temb)
        skip1 = self.down1(self.downsample(skip0), temb)
        h = self.mid_block1(skip1, temb)
        h = self.mid_attn(h)
        h = self.mid_block2(h, temb)
        h = self.up1(torch.cat([h, skip1], dim=1), temb)
        h = self.upsample(h)
        h = self.up0(torch.cat([h, skip0], dim=1), temb)
        pred = self.conv_out(F.silu(self.norm_out(h)))
        return pred, F.mse_loss(pred, noise)


# ---------------------------------------------------------------------------
# SegFormer


class OverlapPatchEmbeddings(nn.Module):
    def __init__(self, cin, cout, kernel, stride):
        super().__init__()
        self.proj = nn.Conv2d(cin, cout, kernel, stride=stride,
                              padding=kernel // 2)
        self.layer_norm = nn.LayerNorm(cout)

    def forward(self, x):
        x = self.proj(x)
        b, c, h, w = x.shape
        return self.layer_norm(x.flatten(2).transpose(1, 2)), h, w


class EfficientSelfAttention(nn.Module):
    def __init__(self, dim, heads, sr_ratio):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, sr_ratio, stride=sr_ratio)
            self.layer_norm = nn.LayerNorm(dim)

    def split(self, t):
        b, n, c = t.shape
        return t.view(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, x, h, w):
        b, n, c = x.shape
        q = self.split(self.query(x))
        if self.sr_ratio > 1:
            grid = x.transpose(1, 2).reshape(b, c, h, w)
            x = self.sr(grid).reshape(b, c, -1).transpose(1, 2)
            x = self.layer_norm(x)
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        out = torch.matmul(scores.softmax(dim=-1), v)
        return out.transpose(1, 2).reshape(b, n, c)


class Attention(nn.Module):
    def __init__(self, dim, heads, sr_ratio):
        super().__init__()
        self.self = EfficientSelfAttention(dim, heads, sr_ratio)
        self.output = nn.Linear(dim, dim)

    def forward(self, x, h, w):
        return self.output(self.self(x, h, w))


class MixFFN(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.dense1 = nn.Linear(dim, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.dense2 = nn.Linear(hidden, dim)

    def forward(self, x, h, w):
        x = self.dense1(x)
        b, n, c = x.shape
        x = x.transpose(1, 2).reshape(b, c, h, w)
        x = self.dwconv(x).flatten(2).transpose(1, 2)
        return self.dense2(F.gelu(x))


class SegformerLayer(nn.Module):
    def __init__(self, dim, heads, sr_ratio, mlp_ratio=4):
        super().__init__()
        self.layer_norm_1 = nn.LayerNorm(dim)
        self.attention = Attention(dim, heads, sr_ratio)
        self.layer_norm_2 = nn.LayerNorm(dim)
        self.mlp = MixFFN(dim, dim * mlp_ratio)

    def forward(self, x, h, w):
        x = x + self.attention(self.layer_norm_1(x), h, w)
        return x + self.mlp(self.layer_norm_2(x), h, w)


class SegformerStage(nn.Module):
    def __init__(self, cin, dim, kernel, stride, heads, sr_ratio):
        super().__init__()
        self.patch_embeddings = OverlapPatchEmbeddings(cin, dim, kernel,
                                                       stride)
        self.block = SegformerLayer(dim, heads, sr_ratio)
        self.layer_norm = nn.LayerNorm(dim)

    def forward(self, x):
        x, h, w = self.patch_embeddings(x)
        x = self.layer_norm(self.block(x, h, w))
        b, n, c = x.shape
        return x.transpose(1, 2).reshape(b, c, h, w)


class Segformer(nn.Module):
    """Stages at 1/4 (16 channels) and 1/8 (32) of a 32x32 image, an
    all-MLP decoder at 1/4 with 32 channels, 5 classes."""

    def __init__(self, num_classes=5, decoder_dim=32):
        super().__init__()
        self.stages = nn.ModuleList([
            SegformerStage(3, 16, kernel=7, stride=4, heads=2, sr_ratio=2),
            SegformerStage(16, 32, kernel=3, stride=2, heads=2, sr_ratio=1),
        ])
        self.linear_c = nn.ModuleList([nn.Linear(16, decoder_dim),
                                       nn.Linear(32, decoder_dim)])
        self.linear_fuse = nn.Conv2d(2 * decoder_dim, decoder_dim, 1,
                                     bias=False)
        self.classifier = nn.Conv2d(decoder_dim, num_classes, 1)

    def forward(self, pixel_values, labels):
        features = []
        x = pixel_values
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        size = features[0].shape[2:]
        decoded = []
        for feature, mlp in zip(features, self.linear_c):
            b, c, h, w = feature.shape
            y = mlp(feature.flatten(2).transpose(1, 2))
            y = y.transpose(1, 2).reshape(b, -1, h, w)
            decoded.append(F.interpolate(y, size=size, mode="bilinear",
                                         align_corners=False))
        fused = F.relu(self.linear_fuse(torch.cat(decoded[::-1], dim=1)))
        logits = self.classifier(fused)
        return logits, F.cross_entropy(logits, labels)


# ---------------------------------------------------------------------------

MODELS = {"unet": UNet, "segformer": Segformer}


def make_batches(kind, steps, batch, gen):
    """Every step's inputs, by name, each [STEPS, ...]."""
    if kind == "unet":
        x0 = torch.randn(steps, batch, 3, 16, 16, generator=gen)
        noise = torch.randn(steps, batch, 3, 16, 16, generator=gen)
        t = torch.randint(0, 1000, (steps, batch), generator=gen)
        betas = torch.linspace(1e-4, 0.02, 1000)
        alpha_bar = torch.cumprod(1.0 - betas, dim=0)[t][..., None, None,
                                                         None]
        noisy = alpha_bar.sqrt() * x0 + (1.0 - alpha_bar).sqrt() * noise
        return {"noisy": noisy, "timesteps": t, "noise": noise}
    # One image batch every step, so the loss falls as the model learns it.
    pixels = torch.randn(batch, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 5, (batch, 8, 8), generator=gen)
    return {"pixel_values": pixels.expand(steps, *pixels.shape).clone(),
            "labels": labels.expand(steps, *labels.shape).clone()}


def main():
    kind, model_path, batches_path = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    torch.manual_seed(0)
    model = MODELS[kind]().train()
    gen = torch.Generator().manual_seed(1)
    inputs = make_batches(kind, steps, batch, gen)
    example = tuple(t[0, :2] for t in inputs.values())
    merak_trace.save(model, example, model_path)
    merak_safetensors.save(inputs, batches_path)
    params = sum(p.numel() for p in model.parameters())
    print("%s: %d parameters" % (kind, params))


if __name__ == "__main__":
    main()
