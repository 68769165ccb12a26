"""The torch serving server (CPU, tiny shapes): its cached decode is exact, the padded decode
(bucketed batch, fixed span: what the CUDA graphs run) gives the same tokens, every request gets
its timestamps, and the comparison with gpuplan runs end to end."""

import json
import time

import pytest

torch = pytest.importorskip("torch")

from gpuplan.validate.serving import compare  # noqa: E402
from gpuplan.validate.serving.__main__ import main as serve_main  # noqa: E402
from gpuplan.validate.serving.model import TINY, Model  # noqa: E402
from gpuplan.validate.serving.padded_decode import PaddedDecoder, decode_buckets  # noqa: E402


@torch.inference_mode()
def test_decoding_from_the_cache_gives_the_tokens_a_full_forward_gives():
    torch.manual_seed(0)
    model = Model(TINY, max_seqs=4, max_len=40, device="cpu", dtype=torch.float32)
    seqs = [torch.randint(0, TINY["vocab"], (n,)).tolist() for n in (5, 9)]
    for slot, seq in enumerate(seqs):
        seq.append(int(model.prefill(torch.tensor([seq]), torch.tensor([slot]))[0]))

    def reference(seq):  # no cache: the whole sequence through the prefill path, scratch slot
        return int(model.prefill(torch.tensor([seq]), torch.tensor([3]))[0])

    for step in range(6):
        if step == 3:  # sequence 0 finishes: sequence 1's cache moves into slot 0
            model.move_slot(1, 0, len(seqs[1]))
            seqs = seqs[1:]
        positions = torch.tensor([len(s) - 1 for s in seqs])
        tokens = torch.tensor([s[-1] for s in seqs])
        out = model.decode(tokens, positions, int(positions.max()) + 1).tolist()
        assert out == [reference(s) for s in seqs]
        for s, tok in zip(seqs, out, strict=True):
            s.append(tok)


def test_decode_buckets_are_powers_of_two_then_the_most_sequences():
    assert decode_buckets(1) == [1]
    assert decode_buckets(6) == [1, 2, 4, 6]
    assert decode_buckets(32) == [1, 2, 4, 8, 16, 32]


@torch.inference_mode()
def test_the_padded_decode_gives_the_tokens_the_unpadded_decode_gives():
    models = []
    for _ in range(2):  # the same weights twice: each keeps its own cache
        torch.manual_seed(0)
        models.append(Model(TINY, max_seqs=8, max_len=48, device="cpu", dtype=torch.float32))
    plain, padded = models
    decoder = PaddedDecoder(padded, buckets=decode_buckets(8), span=48, device="cpu",
                            graphs=False)  # fmt: skip
    seqs = [torch.randint(0, TINY["vocab"], (n,)).tolist() for n in (5, 9, 13, 7, 11)]
    for slot, seq in enumerate(seqs):
        for model in models:
            first = int(model.prefill(torch.tensor([seq]), torch.tensor([slot]))[0])
        seq.append(first)
    for step in range(10):
        if step == 4:  # sequence 1 finishes: the last sequence's cache moves into its slot
            for model in models:
                model.move_slot(len(seqs) - 1, 1, len(seqs[-1]))
            seqs[1] = seqs.pop()
        positions = [len(s) - 1 for s in seqs]
        tokens = [s[-1] for s in seqs]
        want = plain.decode(torch.tensor(tokens), torch.tensor(positions), max(positions) + 1)
        got = decoder(tokens, positions, time.perf_counter())
        assert decoder.bucket(len(seqs)) in (8, 4)
        assert got == want.tolist()
        for s, tok in zip(seqs, got, strict=True):
            s.append(tok)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving")
    serve_main(["--out", str(out), "--tiny", "--device", "cpu", "--rates", "30,80",
                "--duration-s", "0.4", "--prompt-tokens", "24", "--output-tokens", "6",
                "--max-seqs", "4", "--max-batched-tokens", "64"])  # fmt: skip
    return out


def test_the_server_records_every_request_with_ordered_timestamps(run_folder):
    rows = [json.loads(line) for line in (run_folder / "requests.jsonl").read_text().splitlines()]
    assert {r["rate_per_s"] for r in rows} == {30.0, 80.0}
    for r in rows:
        assert r["finish_s"] is not None
        assert r["arrival_s"] <= r["first_token_s"] <= r["finish_s"]
    iters = [json.loads(x) for x in (run_folder / "iterations.jsonl").read_text().splitlines()]
    assert {i["kind"] for i in iters} == {"prefill", "decode"}
    assert all(i["seqs"] <= 4 and i["end_s"] > i["start_s"] for i in iters)
    settings = json.loads((run_folder / "settings.json").read_text())
    assert settings["policy"] == "continuous" and settings["max_seqs"] == 4


def test_the_comparison_predicts_each_rate_and_writes_its_table(run_folder):
    compare.main([str(run_folder), "--device-key", "h200"])
    doc = json.loads((run_folder / "comparison.json").read_text())
    assert len(doc["rows"]) == 2 * 2 * 2  # rates x (TTFT, TPOT) x (p50, p90)
    assert all(r["predicted"] > 0 and r["measured"] > 0 for r in doc["rows"])
    assert set(doc["iteration_median_abs_pct_error"]) == {"prefill", "decode"}
    assert "| rate (req/s) |" in (run_folder / "comparison.md").read_text()


@pytest.fixture(scope="module")
def padded_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving_padded")
    serve_main(["--out", str(out), "--tiny", "--device", "cpu", "--cuda-graph", "--rates", "40",
                "--duration-s", "0.3", "--prompt-tokens", "24", "--output-tokens", "6",
                "--max-seqs", "6", "--max-batched-tokens", "64"])  # fmt: skip
    return out


def test_the_padded_server_records_the_work_each_decode_iteration_runs(padded_folder):
    settings = json.loads((padded_folder / "settings.json").read_text())
    assert settings["cuda_graph"] is False  # no graphs on the CPU: the padded step runs eagerly
    assert settings["decode_padding"] == {"buckets": [1, 2, 4, 6], "context_tokens": 30}
    iters = [json.loads(x) for x in (padded_folder / "iterations.jsonl").read_text().splitlines()]
    decode = [i for i in iters if i["kind"] == "decode"]
    assert decode
    for i in decode:
        assert i["bucket"] == min(b for b in (1, 2, 4, 6) if b >= i["seqs"])
        assert i["span"] == 30 and 0 <= i["prep_s"] <= i["end_s"] - i["start_s"]


def test_the_comparison_predicts_the_padded_decode(padded_folder):
    doc = compare.compare(padded_folder, device_key="h200")
    assert doc["decode_buckets"] == [1, 2, 4, 6] and doc["decode_context_tokens"] == 30
    assert doc["decode_prep_s"] > 0
    assert doc["iteration_overhead_s"] == pytest.approx(doc["host_gap_s"] + doc["decode_prep_s"])
    buckets = {b["bucket"] for b in doc["iteration_errors_by_bucket"]}
    assert buckets <= {1, 2, 4, 6}


@pytest.mark.parametrize(
    ("settings", "kernel"),
    [
        ({"device": "cuda"}, "cudnn"),  # recorded before the setting: PyTorch's default dispatch
        ({"device": "cuda", "cudnn_attention": True}, "cudnn"),
        ({"device": "cuda", "cudnn_attention": False}, "flash2"),
        ({"device": "cpu"}, "flash2"),
    ],
)
def test_the_comparison_prices_the_attention_kernels_the_server_ran(settings, kernel):
    assert compare.attention_kernel_of(settings) == kernel
