"""A random-weight llama model in GGUF, made on the spot for the live llama.cpp test.

No weights are downloaded: the tokenizer comes from the vocabulary file that
llama.cpp ships in its source (`models/ggml-vocab-llama-spm.gguf`), the weights
are seeded noise. What it says is gibberish; what matters is that llama-server
loads it and spends real time per token, so slots fill and requests queue.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

N_EMBD = 64
N_LAYERS = 2
N_HEADS = 4
N_FF = 128


def write_tiny_llama(vocab: Path, out: Path, context_length: int, seed: int = 0, *,
                     n_embd: int = N_EMBD, n_layers: int = N_LAYERS, n_ff: int = N_FF) -> Path:
    """Writes the model to `out` and returns it; `context_length` caps a generation.

    Wider or deeper than the defaults, each token costs more (bench.scheduling makes a
    request last seconds that way, rather than by thousands of tokens per request)."""
    reader = gguf.GGUFReader(vocab)
    tokenizer = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"].contents())
    writer = gguf.GGUFWriter(out, arch="llama")
    writer.add_name("poolscope-tiny-llama")
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_HEADS)
    writer.add_rope_dimension_count(n_embd // N_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key, field in tokenizer.items():
        vtype = field.types[0]
        writer.add_key_value(key, field.contents(), vtype,
                             field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None)

    rng = np.random.default_rng(seed)

    def tensor(name: str, *shape: int) -> None:
        data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        writer.add_tensor(name, data if len(shape) > 1 else np.ones(shape, np.float32))

    tensor("token_embd.weight", n_vocab, n_embd)
    tensor("output_norm.weight", n_embd)
    tensor("output.weight", n_vocab, n_embd)
    for i in range(n_layers):
        tensor(f"blk.{i}.attn_norm.weight", n_embd)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{part}.weight", n_embd, n_embd)
        tensor(f"blk.{i}.ffn_norm.weight", n_embd)
        tensor(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
