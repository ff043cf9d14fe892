"""How much the transformers engine's levers save, measured side by side in one run.

The same requests (the step-mode prompts of some sample queries, then a second turn of each
as an end-to-end episode would send it) are answered twice by SmolLM2-135M-Instruct on this
CPU:

* naive: Hugging Face's ``model.generate``, one request at a time, every prompt computed whole;
* engine: :class:`pytest_gta.models.hf_decoder.TransformersEngine`, the requests of a
  round in one batch, prompts computed only after their longest cached prefix.

It prints the wall time of each, the speed-up, the prompt tokens each computed, and whether
the replies are the same (greedy decoding: they should be).

    python benchmarks/transformers_engine.py --ids 0,1,2 --max-tokens 64
"""

from __future__ import annotations

import argparse
import time

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.run import loops
from pytest_gta.validation import load_dataset


def naive(engine, payloads):
    """One ``model.generate`` per payload; returns (texts, prompt tokens computed)."""
    import torch

    loaded = engine.handle
    texts, computed = [], 0
    for payload in payloads:
        prompt = loaded.tokenizer.apply_chat_template(
            list(payload["messages"]), tokenize=False, add_generation_prompt=True
        )
        ids = loaded.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        computed += ids.shape[1]
        with torch.inference_mode():
            out = loaded.model.generate(
                input_ids=ids,
                max_new_tokens=payload["sampling"]["max_tokens"],
                do_sample=False,
                eos_token_id=sorted(loaded.eos_ids),
                pad_token_id=sorted(loaded.eos_ids)[0],
            )
        texts.append(loaded.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return texts, computed


def second_turns(payloads, replies):
    """Each conversation one turn later: the reply, then an observation, as e2e sends them."""
    out = []
    for payload, reply in zip(payloads, replies, strict=True):
        messages = [
            *payload["messages"],
            {"role": "assistant", "content": reply.strip()},
            {"role": "system", "content": "Response:Please follow the format\n"},
        ]
        out.append({**payload, "messages": messages})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", default="0,1,2", help="sample query ids (default: 0,1,2)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    dataset = load_dataset(bundled_sample_path())
    context = ModelContext(
        dataset=dataset,
        modes=("step",),
        invocation_dir=bundled_sample_path(),
        generation=GenerationSettings(max_tokens=args.max_tokens),
    )
    model = make_model("smollm2", context)
    engine = model.engine
    start = time.perf_counter()
    engine.load()
    print(f"model loaded in {time.perf_counter() - start:.1f} s ({engine.threads} threads)")
    requests = [
        request
        for qid in args.ids.split(",")
        for request, _ in loops.step_requests(dataset, dataset[qid.strip()])
    ]
    first = [model.prepare(r).payload for r in requests]

    start = time.perf_counter()
    naive_first, naive_tokens = naive(engine, first)
    second = second_turns(first, naive_first)
    naive_second, more = naive(engine, second)
    naive_seconds = time.perf_counter() - start

    start = time.perf_counter()
    engine_first = [o.text for o in engine.run(first)]
    engine_second = [o.text for o in engine.run(second_turns(first, engine_first))]
    engine_seconds = time.perf_counter() - start
    stats = engine.stats

    pairs = zip(naive_first + naive_second, engine_first + engine_second, strict=True)
    same = sum(a == b for a, b in pairs)
    total = len(first) * 2
    print(f"{len(first)} step prompts of queries {args.ids}, then one more turn each")
    print(f"{'':8} {'seconds':>8} {'prompt tokens computed':>24}")
    print(f"{'naive':8} {naive_seconds:8.1f} {naive_tokens + more:>24}")
    print(f"{'engine':8} {engine_seconds:8.1f} {stats['prefill_tokens']:>24.0f}")
    print(f"speed-up: {naive_seconds / engine_seconds:.1f}x; identical replies: {same}/{total}")
    print(
        f"engine: {stats['steps']:.0f} decode steps of {stats['rows'] / max(1, stats['steps']):.1f}"
        f" rows on average; {stats['reused_tokens']:.0f} prompt tokens reused"
    )
    engine.close()


if __name__ == "__main__":
    main()
