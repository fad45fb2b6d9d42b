"""Three language-model families in plain PyTorch, at toy sizes, written the
way Hugging Face's modeling code writes them (module layout, parameter
names, mask and position arithmetic), traced as a user would.

language_models.py opt|gptj|bart MODEL.pt BATCHES.safetensors STEPS [BATCH]

- opt: OPT's decoder: learned positions counted from the attention mask
  with an offset of 2, pre-LayerNorm layers, a ReLU MLP, a final layer
  norm, the LM head tied to the token embedding, an additive causal mask;
  attention in OPT's form, heads folded into the batch for `bmm`;
- gptj: GPT-J's decoder: one layer norm feeds attention and MLP side by
  side (x + attn(ln(x)) + mlp(ln(x))), rotary embedding on the first
  `rotary_dim` channels of each head in GPT-J's interleaved form
  (rotate_every_two, sin/cos gathered from a table), no biases on
  q/k/v/out, the tanh GELU written out, an untied LM head with a bias;
- bart: BART's encoder-decoder: learned positions with an offset of 2,
  scaled embeddings, layernorm_embedding, post-LayerNorm layers, a padding
  mask in encoder self-attention and cross-attention, causal decoder
  self-attention, GELU, the LM head tied to the shared embedding plus the
  final_logits_bias buffer, cross-entropy over the decoder labels (-100 at
  padding).

Every model returns (logits, loss). The batches file holds, per step, the
forward's inputs: `input_ids` and `labels` [STEPS, B, 16] for opt and gptj
(the models shift the labels, as causal LMs do); `input_ids`,
`attention_mask`, `decoder_input_ids` and `labels` for bart (the second
sequence of each batch is padded; the decoder inputs are the labels
shifted right). One batch is repeated every step, so the loss falls as the
model memorises it. B = 2 unless given; the trace is at batch 2.
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

SEQ = 16


def init_weights(module, std=0.02):
    """N(0, std) linear and embedding weights, zero biases (the three
    families' _init_weights)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        with torch.no_grad():
            module.weight[module.padding_idx].zero_()


def make_causal_mask(tgt_len, dtype):
    """[1, 1, T, T]: 0 on and below the diagonal, the dtype's minimum above
    (OPT's and BART's _make_causal_mask)."""
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    cond = torch.arange(mask.size(-1))
    mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)
    return mask.to(dtype)[None, None, :, :]


def expand_mask(mask, dtype, tgt_len):
    """[B, S] 1/0 padding mask -> [B, 1, T, S] additive mask."""
    bsz, src_len = mask.size()
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len,
                                             src_len).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool),
                                torch.finfo(dtype).min)


class FoldedHeadsAttention(nn.Module):
    """OPT's and BART's attention: the query scaled before the product,
    heads folded into the batch for `bmm`, an additive mask."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads,
                           self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, attention_mask, key_value_states=None):
        bsz, tgt_len, _ = hidden_states.size()
        kv = hidden_states if key_value_states is None else key_value_states
        query_states = self.q_proj(hidden_states) * self.scaling
        key_states = self._shape(self.k_proj(kv), -1, bsz)
        value_states = self._shape(self.v_proj(kv), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len,
                                   bsz).view(*proj_shape)
        key_states = key_states.view(*proj_shape)
        value_states = value_states.view(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len,
                                         src_len) + attention_mask
        attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len,
                                         src_len)
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len,
                                       self.head_dim)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


# --------------------------------------------------------------------------
# OPT
# --------------------------------------------------------------------------

class OPTConfig:
    vocab_size = 96
    hidden_size = 32
    ffn_dim = 64
    num_hidden_layers = 2
    num_attention_heads = 4
    max_position_embeddings = 32
    pad_token_id = 1


class OPTLearnedPositionalEmbedding(nn.Embedding):
    """Positions counted from the attention mask, offset by 2 (OPT's
    checkpoints keep two extra rows in front)."""

    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, attention_mask):
        attention_mask = attention_mask.long()
        positions = (torch.cumsum(attention_mask, dim=1).type_as(
            attention_mask) * attention_mask).long() - 1
        return super().forward(positions + self.offset)


class OPTDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = FoldedHeadsAttention(cfg.hidden_size,
                                              cfg.num_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.hidden_size)
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.hidden_size)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc2(F.relu(self.fc1(hidden_states)))
        return residual + hidden_states


class OPTDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         cfg.pad_token_id)
        self.embed_positions = OPTLearnedPositionalEmbedding(
            cfg.max_position_embeddings, cfg.hidden_size)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_size)
        self.layers = nn.ModuleList([OPTDecoderLayer(cfg)
                                     for _ in range(cfg.num_hidden_layers)])

    def forward(self, input_ids):
        bsz, seq_len = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids)
        # No mask given: every token is real, as in OPTDecoder.
        attention_mask = torch.ones(bsz, seq_len, dtype=torch.bool)
        pos_embeds = self.embed_positions(attention_mask)
        causal_mask = make_causal_mask(seq_len, inputs_embeds.dtype)
        causal_mask = causal_mask + expand_mask(attention_mask,
                                                inputs_embeds.dtype, seq_len)
        hidden_states = inputs_embeds + pos_embeds
        for layer in self.layers:
            hidden_states = layer(hidden_states, causal_mask)
        return self.final_layer_norm(hidden_states)


class OPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.decoder = OPTDecoder(cfg)

    def forward(self, input_ids):
        return self.decoder(input_ids)


class OPTForCausalLM(nn.Module):
    def __init__(self, cfg=OPTConfig()):
        super().__init__()
        self.cfg = cfg
        self.model = OPTModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(init_weights)
        self.lm_head.weight = self.model.decoder.embed_tokens.weight

    def forward(self, input_ids, labels):
        logits = self.lm_head(self.model(input_ids))
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, self.cfg.vocab_size),
                               shift_labels.view(-1))
        return logits, loss


# --------------------------------------------------------------------------
# GPT-J
# --------------------------------------------------------------------------

class GPTJConfig:
    vocab_size = 96
    n_embd = 64
    n_layer = 2
    n_head = 4
    rotary_dim = 8  # of a head's 16 channels
    n_positions = 32
    layer_norm_epsilon = 1e-5


def create_sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j",
                                torch.arange(num_pos, dtype=torch.float),
                                inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)),
                     dim=1)


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_rotary_pos_emb(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        max_positions = cfg.n_positions
        self.register_buffer("bias", torch.tril(torch.ones(
            (max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions), persistent=False)
        self.embed_dim = cfg.n_embd
        self.num_attention_heads = cfg.n_head
        self.head_dim = self.embed_dim // self.num_attention_heads
        self.scale_attn = math.sqrt(self.head_dim)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.rotary_dim = cfg.rotary_dim
        # A plain attribute, not a buffer: the trace keeps it as a constant.
        self.embed_positions = create_sinusoidal_positions(max_positions,
                                                           self.rotary_dim)

    def _split_heads(self, tensor, rotary):
        new_shape = tensor.size()[:-1] + (self.num_attention_heads,
                                          self.head_dim)
        tensor = tensor.view(new_shape)
        if rotary:
            return tensor
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (self.num_attention_heads *
                                          self.head_dim,)
        return tensor.view(new_shape)

    def _attn(self, query, key, value):
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length,
                                :key_length]
        query = query.to(torch.float32)
        key = key.to(torch.float32)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.tensor(mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights / self.scale_attn
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.to(value.dtype)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, position_ids):
        query = self._split_heads(self.q_proj(hidden_states), True)
        key = self._split_heads(self.k_proj(hidden_states), True)
        value = self._split_heads(self.v_proj(hidden_states), False)

        embed_positions = self.embed_positions.repeat(
            position_ids.shape[0], 1, 1)
        repeated_position_ids = position_ids.unsqueeze(-1).repeat(
            1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)

        k_rot = key[:, :, :, :self.rotary_dim]
        k_pass = key[:, :, :, self.rotary_dim:]
        q_rot = query[:, :, :, :self.rotary_dim]
        q_pass = query[:, :, :, self.rotary_dim:]
        k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
        q_rot = apply_rotary_pos_emb(q_rot, sin, cos)
        key = torch.cat([k_rot, k_pass], dim=-1)
        query = torch.cat([q_rot, q_pass], dim=-1)
        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)

        attn_output = self._attn(query, key, value)
        return self.out_proj(self._merge_heads(attn_output))


class NewGELUActivation(nn.Module):
    """GELU's tanh approximation, written out as GPT-J's code has it."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (
            x + 0.044715 * torch.pow(x, 3.0))))


class GPTJMLP(nn.Module):
    def __init__(self, intermediate_size, cfg):
        super().__init__()
        self.fc_in = nn.Linear(cfg.n_embd, intermediate_size)
        self.fc_out = nn.Linear(intermediate_size, cfg.n_embd)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        return self.fc_out(self.act(self.fc_in(hidden_states)))


class GPTJBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = GPTJAttention(cfg)
        self.mlp = GPTJMLP(4 * cfg.n_embd, cfg)

    def forward(self, hidden_states, position_ids):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states, position_ids)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return attn_output + feed_forward_hidden_states + residual


class GPTJModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.h = nn.ModuleList([GPTJBlock(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def forward(self, input_ids):
        seq_len = input_ids.size(-1)
        position_ids = torch.arange(0, seq_len, dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, seq_len)
        hidden_states = self.wte(input_ids)
        for block in self.h:
            hidden_states = block(hidden_states, position_ids)
        return self.ln_f(hidden_states)


class GPTJForCausalLM(nn.Module):
    def __init__(self, cfg=GPTJConfig()):
        super().__init__()
        self.cfg = cfg
        self.transformer = GPTJModel(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size)
        self.apply(init_weights)

    def forward(self, input_ids, labels):
        hidden_states = self.transformer(input_ids)
        lm_logits = self.lm_head(hidden_states).to(torch.float32)
        shift_logits = lm_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                               shift_labels.view(-1))
        return lm_logits, loss


# --------------------------------------------------------------------------
# BART
# --------------------------------------------------------------------------

class BartConfig:
    vocab_size = 96
    d_model = 32
    encoder_layers = 2
    decoder_layers = 2
    encoder_attention_heads = 4
    decoder_attention_heads = 4
    encoder_ffn_dim = 64
    decoder_ffn_dim = 64
    max_position_embeddings = 32
    scale_embedding = True
    pad_token_id = 1
    decoder_start_token_id = 2


class BartLearnedPositionalEmbedding(nn.Embedding):
    """Positions 0..T-1 offset by 2 (BART's checkpoints keep two extra rows
    in front)."""

    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, input_ids):
        bsz, seq_len = input_ids.shape[:2]
        positions = torch.arange(0, seq_len, dtype=torch.long,
                                 device=self.weight.device).expand(bsz, -1)
        return super().forward(positions + self.offset)


class BartEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = FoldedHeadsAttention(cfg.d_model,
                                              cfg.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.encoder_ffn_dim)
        self.fc2 = nn.Linear(cfg.encoder_ffn_dim, cfg.d_model)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        return self.final_layer_norm(residual + hidden_states)


class BartDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = FoldedHeadsAttention(cfg.d_model,
                                              cfg.decoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.encoder_attn = FoldedHeadsAttention(cfg.d_model,
                                                 cfg.decoder_attention_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.decoder_ffn_dim)
        self.fc2 = nn.Linear(cfg.decoder_ffn_dim, cfg.d_model)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, hidden_states, attention_mask, encoder_hidden_states,
                encoder_attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.encoder_attn(
            hidden_states, encoder_attention_mask,
            key_value_states=encoder_hidden_states)
        hidden_states = self.encoder_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        return self.final_layer_norm(residual + hidden_states)


class BartEncoder(nn.Module):
    def __init__(self, cfg, embed_tokens):
        super().__init__()
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding \
            else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions = BartLearnedPositionalEmbedding(
            cfg.max_position_embeddings, cfg.d_model)
        self.layers = nn.ModuleList([BartEncoderLayer(cfg)
                                     for _ in range(cfg.encoder_layers)])
        self.layernorm_embedding = nn.LayerNorm(cfg.d_model)

    def forward(self, input_ids, attention_mask):
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        hidden_states = inputs_embeds + self.embed_positions(input_ids)
        hidden_states = self.layernorm_embedding(hidden_states)
        attention_mask = expand_mask(attention_mask, inputs_embeds.dtype,
                                     input_ids.size(1))
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BartDecoder(nn.Module):
    def __init__(self, cfg, embed_tokens):
        super().__init__()
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding \
            else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions = BartLearnedPositionalEmbedding(
            cfg.max_position_embeddings, cfg.d_model)
        self.layers = nn.ModuleList([BartDecoderLayer(cfg)
                                     for _ in range(cfg.decoder_layers)])
        self.layernorm_embedding = nn.LayerNorm(cfg.d_model)

    def forward(self, input_ids, encoder_hidden_states,
                encoder_attention_mask):
        tgt_len = input_ids.size(1)
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        attention_mask = make_causal_mask(tgt_len, inputs_embeds.dtype)
        encoder_attention_mask = expand_mask(
            encoder_attention_mask, inputs_embeds.dtype, tgt_len)
        hidden_states = inputs_embeds + self.embed_positions(input_ids)
        hidden_states = self.layernorm_embedding(hidden_states)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask,
                                  encoder_hidden_states,
                                  encoder_attention_mask)
        return hidden_states


class BartModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model,
                                   cfg.pad_token_id)
        self.encoder = BartEncoder(cfg, self.shared)
        self.decoder = BartDecoder(cfg, self.shared)

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        encoder_outputs = self.encoder(input_ids, attention_mask)
        return self.decoder(decoder_input_ids, encoder_outputs,
                            attention_mask)


class BartForConditionalGeneration(nn.Module):
    def __init__(self, cfg=BartConfig()):
        super().__init__()
        self.cfg = cfg
        self.model = BartModel(cfg)
        self.register_buffer("final_logits_bias",
                             torch.zeros((1, cfg.vocab_size)))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(init_weights)
        self.lm_head.weight = self.model.shared.weight
        # A fine-tuned checkpoint's bias is not zero; this one shows that
        # it is added.
        with torch.no_grad():
            self.final_logits_bias.normal_(0.0, 0.1)

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels):
        outputs = self.model(input_ids, attention_mask, decoder_input_ids)
        lm_logits = self.lm_head(outputs)
        lm_logits = lm_logits + self.final_logits_bias
        loss = F.cross_entropy(lm_logits.view(-1, self.cfg.vocab_size),
                               labels.view(-1))
        return lm_logits, loss


def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    shifted.masked_fill_(shifted == -100, pad_token_id)
    return shifted


MODELS = {
    "opt": OPTForCausalLM,
    "gptj": GPTJForCausalLM,
    "bart": BartForConditionalGeneration,
}


def make_batch(kind, model, batch, gen):
    """One batch of the forward's inputs, by name."""
    vocab = model.cfg.vocab_size
    # Tokens from 3 up: 0..2 are BOS, PAD and EOS in these vocabularies.
    ids = torch.randint(3, vocab, (batch, SEQ), generator=gen)
    if kind != "bart":
        return {"input_ids": ids, "labels": ids.clone()}
    pad = model.cfg.pad_token_id
    mask = torch.ones(batch, SEQ, dtype=torch.long)
    labels = torch.randint(3, vocab, (batch, SEQ), generator=gen)
    for b in range(1, batch, 2):
        # Every second sequence is 5 tokens short, in and out.
        mask[b, SEQ - 5:] = 0
        ids[b, SEQ - 5:] = pad
        labels[b, SEQ - 5:] = -100
    decoder_ids = shift_tokens_right(labels, pad,
                                     model.cfg.decoder_start_token_id)
    return {"input_ids": ids, "attention_mask": mask,
            "decoder_input_ids": decoder_ids, "labels": labels}


def main():
    kind, model_path, batches_path = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    torch.manual_seed(0)
    model = MODELS[kind]().train()
    gen = torch.Generator().manual_seed(1)
    inputs = make_batch(kind, model, batch, gen)
    example = tuple(t[:2] for t in inputs.values())
    merak_trace.save(model, example, model_path)
    merak_safetensors.save({name: t.unsqueeze(0).repeat(
        steps, *([1] * t.dim())) for name, t in inputs.items()},
        batches_path)
    params = sum(p.numel() for p in model.parameters())
    print("%s: %d parameters" % (kind, params))


if __name__ == "__main__":
    main()
