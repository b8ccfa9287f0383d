"""Trains moeserve's two small real models on the KJV text (corpus.py) with a byte-level BPE
(bpe.py), on the CPU with fixed seeds, and writes them as Hugging Face model directories:

    /usr/bin/python3 tools/train/train.py --out models [--steps 700] [--threads 1] [--only NAME]

models/qwen3-moe-kjv: qwen3_moe; models/deepseek-v3-kjv: deepseek_v3 with its MTP layer. Each
directory also gets train_log.json (the losses, the held-out perplexity, the expert load
histogram on the test split). Results are bit-identical for the same torch build, thread count
and arguments (torch.use_deterministic_algorithms; every random draw from seeded generators).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import bpe  # noqa: E402
import corpus  # noqa: E402
import models  # noqa: E402
import safetensors_np  # noqa: E402

BASE_VOCAB = 4093  # BPE tokens (256 bytes + merges); 3 special tokens follow: vocab_size 4096
SEQ_LEN = 512
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEEPSEEK_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
# ChatML, the turn format of Qwen's chat models, written for these models.
CHATML_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] "
                   "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                   "{%- endif %}")
CHAT_QUESTIONS = ["{h}", "Read {h}.", "What does {h} say?", "Tell me {h}.", "Recite {h}, please."]


def qwen3_config():
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": BASE_VOCAB + 3,
        "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 128, "mlp_only_layers": [], "decoder_sparse_step": 1, "norm_topk_prob": True,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
        "tie_word_embeddings": False, "bos_token_id": BASE_VOCAB, "eos_token_id": [BASE_VOCAB + 2, BASE_VOCAB],
        "max_position_embeddings": 4096, "router_aux_loss_coef": 0.01, "output_router_logits": False,
        "torch_dtype": "bfloat16",
    }


def deepseek_config():
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": BASE_VOCAB + 3,
        "hidden_size": 128, "intermediate_size": 384, "moe_intermediate_size": 64, "num_hidden_layers": 3,
        "num_nextn_predict_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 64,
        "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "n_routed_experts": 16, "n_shared_experts": 1, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 4,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": False,
        "bos_token_id": BASE_VOCAB, "eos_token_id": BASE_VOCAB + 1, "max_position_embeddings": 4096,
        "aux_loss_alpha": 0.0001, "seq_aux": True, "torch_dtype": "bfloat16",
    }


def tokenizer_files(vocab, merges, deepseek):
    """(tokenizer.json text, tokenizer_config dict)."""
    names = DEEPSEEK_SPECIALS if deepseek else QWEN_SPECIALS
    specials = [(t, BASE_VOCAB + i) for i, t in enumerate(names)]
    tj = bpe.tokenizer_json(vocab, merges, specials)
    if deepseek:
        cfg = {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": False,
               "bos_token": names[0], "eos_token": names[1], "pad_token": names[1]}
    else:
        cfg = {"tokenizer_class": "Qwen2TokenizerFast", "add_bos_token": False, "bos_token": None,
               "eos_token": names[2], "pad_token": names[0], "chat_template": CHATML_TEMPLATE}
    cfg["model_max_length"] = 4096
    cfg["clean_up_tokenization_spaces"] = False
    return tj, cfg


def chat_stream(enc, chapters, rng, n_tokens):
    """ChatML turns (a question naming a chapter, the chapter's first verses as the answer)
    concatenated to n_tokens tokens."""
    start, end = BASE_VOCAB + 1, BASE_VOCAB + 2
    out = []
    while len(out) < n_tokens:
        heading, verses = chapters[rng.integers(len(chapters))]
        q = CHAT_QUESTIONS[rng.integers(len(CHAT_QUESTIONS))].format(h=heading)
        answer = " ".join(verses[:1 + rng.integers(4)])
        out += [start] + enc.encode("user\n" + q) + [end] + enc.encode("\n")
        out += [start] + enc.encode("assistant\n" + answer) + [end] + enc.encode("\n")
    return out[:n_tokens]


def batches(stream, chat, batch, seq, steps, seed, bos):
    """steps batches [batch, seq] of windows of the token stream (a window with the BOS first
    when bos is not None); a window from the chat stream once in every 16 rows when chat."""
    rng = np.random.default_rng(seed)
    body = seq - (bos is not None)
    for _ in range(steps):
        rows = []
        for _ in range(batch):
            src = chat if chat is not None and rng.integers(16) == 0 else stream
            at = rng.integers(len(src) - body)
            rows.append(([bos] if bos is not None else []) + list(src[at:at + body]))
        yield torch.tensor(rows, dtype=torch.long)


def lr_at(step, steps, peak):
    warmup = 30
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, data, steps, args, log):
    """AdamW with warmup + cosine decay; loss = next-token CE (+ mtp_weight x the MTP CE of the
    token after next) + the balance loss; the DeepSeek routers' biases move after each step."""
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    deepseek = model.c["model_type"] == "deepseek_v3"
    aux_coef = model.c["aux_loss_alpha"] if deepseek else model.c["router_aux_loss_coef"]
    start = time.time()
    model.train()
    for step, ids in enumerate(data):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, args.lr)
        logits, mtp_logits, aux, _ = model(ids)
        v = logits.shape[-1]
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))
        loss = ce + aux_coef * aux
        mtp = None
        if mtp_logits is not None:
            mtp = torch.nn.functional.cross_entropy(mtp_logits[:, :-1].reshape(-1, v), ids[:, 2:].reshape(-1))
            loss = loss + args.mtp_weight * mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if deepseek:
            for m in model.moe_layers():
                m.update_bias(args.bias_update_speed)
        if step % 50 == 0 or step == steps - 1:
            entry = {"step": step, "loss": round(ce.item(), 4), "aux": round(float(aux), 4),
                     "seconds": round(time.time() - start, 1)}
            if mtp is not None:
                entry["mtp_loss"] = round(mtp.item(), 4)
            log.append(entry)
            print(model.c["model_type"], entry, flush=True)
    return time.time() - start


def round_to_bf16(model):
    """Rounds every weight (not the F32 router biases) to bf16 values, as the checkpoint stores them."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


@torch.no_grad()
def evaluate(model, ids, bos):
    """llama-perplexity over the test tokens: chunks of SEQ_LEN (the first replaced by BOS when
    the model has one), each scoring its second half. Also the MTP top-1 accuracy on the same
    positions and the routed slots per expert of every MoE layer."""
    model.eval()
    n_chunks = len(ids) // SEQ_LEN
    nll, mtp_hits, mtp_total = [], 0, 0
    loads = None
    for c in range(n_chunks):
        chunk = list(ids[c * SEQ_LEN:(c + 1) * SEQ_LEN])
        if bos is not None:
            chunk[0] = bos
        x = torch.tensor([chunk])
        logits, mtp_logits, _, routes = model(x)
        first = SEQ_LEN // 2
        lp = torch.log_softmax(logits[0, first:-1].double(), -1)
        nll += (-lp.gather(1, x[0, first + 1:, None])[:, 0]).tolist()
        if mtp_logits is not None:
            pred = mtp_logits[0, first:-1].argmax(-1)
            mtp_hits += int((pred == x[0, first + 2:]).sum())
            mtp_total += len(pred)
        counts = [torch.bincount(r.reshape(-1), minlength=max(int(r.max()) + 1, 1)) for r in routes]
        loads = counts if loads is None else [a + b for a, b in zip(loads, counts)]
    nll = np.array(nll)
    out = {"chunks": n_chunks, "ctx": SEQ_LEN, "scored_tokens": len(nll), "ppl": float(np.exp(nll.mean())),
           "ppl_stderr": float(np.exp(nll.mean()) * nll.std() / math.sqrt(len(nll) - 1)),
           "expert_load": [x.tolist() for x in loads]}
    if mtp_total:
        out["mtp_top1_accuracy"] = mtp_hits / mtp_total
    return out


def write_model(model, out_dir, tok_json, tok_cfg, log):
    os.makedirs(out_dir, exist_ok=True)
    c = model.c
    tensors = {}
    for name, t in model.state_dict().items():
        dtype = "F32" if name.endswith("e_score_correction_bias") else "BF16"
        tensors[name] = (dtype, t.detach().numpy())
    n = c["num_hidden_layers"]
    if c.get("num_nextn_predict_layers"):  # the MTP layer's copies of the shared embedding and head
        tensors[f"model.layers.{n}.embed_tokens.weight"] = tensors["model.embed_tokens.weight"]
        tensors[f"model.layers.{n}.shared_head.head.weight"] = tensors["lm_head.weight"]
    safetensors_np.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    gen = {"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"], "do_sample": False}
    for name, doc in (("generation_config.json", gen), ("tokenizer_config.json", tok_cfg), ("train_log.json", log)):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        f.write(tok_json)


def build_one(name, config, args, enc, vocab, merges, train_ids, test_ids, chapters):
    torch.manual_seed(args.seed)
    deepseek = config["model_type"] == "deepseek_v3"
    model = models.CausalLM(config)
    bos = config["bos_token_id"] if deepseek else None
    chat = None if deepseek else chat_stream(enc, chapters, np.random.default_rng(args.seed + 1), 200000)
    data = batches(train_ids, chat, args.batch, SEQ_LEN, args.steps, args.seed + 2, bos)
    log = {"model": name, "steps": args.steps, "batch": args.batch, "seq_len": SEQ_LEN, "lr": args.lr,
           "threads": args.threads, "seed": args.seed, "torch": torch.__version__, "losses": []}
    if deepseek:
        log.update({"mtp_weight": args.mtp_weight, "bias_update_speed": args.bias_update_speed})
    log["train_seconds"] = round(train(model, data, args.steps, args, log["losses"]), 1)
    round_to_bf16(model)
    log["test"] = evaluate(model, test_ids, bos)
    log["parameters"] = sum(p.numel() for p in model.parameters())
    print(name, {k: v for k, v in log["test"].items() if k != "expert_load"}, flush=True)
    tok_json, tok_cfg = tokenizer_files(vocab, merges, deepseek)
    write_model(model, os.path.join(args.out, name), tok_json, tok_cfg, log)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder that receives the model directories")
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it)")
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--bias-update-speed", type=float, default=0.001)
    ap.add_argument("--only", choices=["qwen3-moe-kjv", "deepseek-v3-kjv"])
    ap.add_argument("--no-check-corpus", action="store_true")
    ap.add_argument("--test-text", help="also write the held-out test text here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    start = time.time()
    train_text, test_text = corpus.splits(check_hash=not args.no_check_corpus)
    if args.test_text:
        with open(args.test_text, "w") as f:
            f.write(test_text)
    vocab, merges = bpe.train(train_text, BASE_VOCAB)
    enc = bpe.Encoder(vocab, merges)
    train_ids, test_ids = np.array(enc.encode(train_text)), enc.encode(test_text)
    chapters = corpus.chapters(corpus.bible_output())
    print(f"corpus: train {len(train_text)} bytes {len(train_ids)} tokens, test {len(test_text)} bytes "
          f"{len(test_ids)} tokens; BPE {len(vocab)} tokens ({time.time() - start:.1f} s)", flush=True)
    for name, config in (("qwen3-moe-kjv", qwen3_config()), ("deepseek-v3-kjv", deepseek_config())):
        if args.only in (None, name):
            build_one(name, config, args, enc, vocab, merges, train_ids, test_ids, chapters)
    print(f"total {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
