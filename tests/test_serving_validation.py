"""The torch serving server (CPU, tiny shapes): its cached decode is exact, every request gets
its timestamps, and the comparison with gpuplan runs end to end."""

import json

import pytest

torch = pytest.importorskip("torch")

from gpuplan.validate.serving import compare  # noqa: E402
from gpuplan.validate.serving.__main__ import main as serve_main  # noqa: E402
from gpuplan.validate.serving.server import TINY, Model  # noqa: E402


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
