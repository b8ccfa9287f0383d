"""Prints the expert load histogram of a trained model (train_log.json's test.expert_load: routed
slots per expert on the held-out split, one list per MoE layer, the MTP layer last) as markdown.

    /usr/bin/python3 tools/train/expert_load.py models/qwen3-moe-kjv
"""

import json
import os
import sys


def main():
    model = sys.argv[1]
    with open(os.path.join(model, "train_log.json")) as f:
        log = json.load(f)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    loads = log["test"]["expert_load"]
    n = config["num_hidden_layers"]
    first = config.get("first_k_dense_replace", 0)
    names = [f"layer {first + i}" for i in range(len(loads))]
    if config.get("num_nextn_predict_layers"):
        names[-1] = f"layer {n} (MTP)"
    experts = max(len(x) for x in loads)
    print("| layer | " + " | ".join(f"e{e}" for e in range(experts)) + " | max / mean | min / mean |")
    print("| --- " * (experts + 3) + "|")
    for name, counts in zip(names, loads):
        counts = counts + [0] * (experts - len(counts))
        total = sum(counts)
        mean = total / experts
        shares = " | ".join(f"{100 * c / total:.1f}" for c in counts)
        print(f"| {name} | {shares} | {max(counts) / mean:.2f} | {min(counts) / mean:.2f} |")


if __name__ == "__main__":
    main()
