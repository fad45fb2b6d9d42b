"""torchaudio's Wav2Vec2 and HuBERT encoders, at toy sizes, with a keyword
classification head, traced as a user would (merak_trace handles the
positional convolution's weight norm, a forward pre-hook).

speech_model.py wav2vec2|hubert MODEL.pt BATCHES.safetensors STEPS [BATCH]

- wav2vec2: Wav2Vec2 large-LV60's layout, the feature extractor's
  convolutions each followed by a layer norm, pre-norm transformer layers;
- hubert: HuBERT base's, a group norm after the first convolution,
  post-norm transformer layers.

Both read raw waveforms [B, 400] and classify the mean of the encoder's
output into 5 classes. The batches file holds `waveforms` [STEPS, B, 400]
and `labels` [STEPS, B] (B = 2 unless given; the trace is at batch 2).
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchaudio

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402

CONFIGS = {
    "wav2vec2": dict(extractor_mode="layer_norm", extractor_conv_bias=True,
                     encoder_layer_norm_first=True),
    "hubert": dict(extractor_mode="group_norm", extractor_conv_bias=False,
                   encoder_layer_norm_first=False),
}


class KeywordSpotter(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.encoder = torchaudio.models.wav2vec2_model(
            extractor_conv_layer_config=[(16, 10, 5), (16, 3, 2), (16, 2, 2)],
            encoder_embed_dim=32, encoder_projection_dropout=0.0,
            encoder_pos_conv_kernel=8, encoder_pos_conv_groups=4,
            encoder_num_layers=2, encoder_num_heads=4,
            encoder_attention_dropout=0.0, encoder_ff_interm_features=64,
            encoder_ff_interm_dropout=0.0, encoder_dropout=0.0,
            encoder_layer_drop=0.0, aux_num_out=None, **CONFIGS[kind])
        self.head = nn.Linear(32, 5)

    def forward(self, waveforms, labels):
        features, _ = self.encoder(waveforms)
        logits = self.head(features.mean(dim=1))
        return logits, F.cross_entropy(logits, labels)


def main():
    kind, model_path, batches_path = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    torch.manual_seed(0)
    model = KeywordSpotter(kind).train()
    gen = torch.Generator().manual_seed(1)
    waves = torch.randn(steps, batch, 400, generator=gen)
    labels = torch.randint(0, 5, (steps, batch), generator=gen)
    merak_trace.save(model, (waves[0, :2], labels[0, :2]), model_path)
    merak_safetensors.save({"waveforms": waves, "labels": labels},
                           batches_path)
    params = sum(p.numel() for p in model.parameters())
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())
    print("%s: %d parameters, %d forward pre-hooks" % (kind, params, hooks))


if __name__ == "__main__":
    main()
