"""The run, bench and doctor verbs, and the input helpers behind them."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edgefuse.benchmark import Progress, bench, latency_stats
from edgefuse.cli import main as cli_main
from edgefuse.errors import InputError
from edgefuse.fallback.ort_session import OrtSession
from edgefuse.reference.feeds import load_input, parse_input_args, random_feeds
from edgefuse.session import TensorSpec
from tests.model_builders import conv_net, save, two_input_model
from tests.needs import optional

pytestmark = pytest.mark.ort

X = TensorSpec("x", (1, 3, 8, 8), np.dtype(np.float32))


@pytest.fixture
def model(tmp_path):
    return save(conv_net(), tmp_path / "conv.onnx")


def test_run_saves_outputs_equal_to_raw_onnxruntime(model, tmp_path, capsys):
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    code = cli_main.main(["run", str(model), "--backend", "cpu", "--input",
                          f"x={tmp_path / 'x.npy'}", "--save", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "backend: cpu" in printed and "output logits: float32[1,5]" in printed
    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    expected = raw.run(None, {"x": x})
    with np.load(out) as saved:
        assert saved["logits"].tobytes() == expected[0].tobytes()
        assert saved["features"].tobytes() == expected[1].tobytes()


def test_run_and_bench_read_the_inputs_files_verify_and_quantize_read(model, tmp_path, capsys,
                                                                     caplog):
    samples = [np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)
               for seed in (1, 2)]
    folder = tmp_path / "samples"
    folder.mkdir()
    for index, x in enumerate(samples):
        np.savez(folder / f"{index}.npz", x=x)
    raw = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    out = tmp_path / "one.npz"
    assert cli_main.main(["run", str(model), "--backend", "cpu", "--inputs",
                          str(folder / "0.npz"), "--save", str(out)]) == 0
    with np.load(out) as saved:
        assert saved["logits"].tobytes() == raw.run(None, {"x": samples[0]})[0].tobytes()
    assert cli_main.main(["run", str(model), "--backend", "cpu", "--inputs", str(folder),
                          "--save", str(out)]) == 0
    with np.load(out) as saved:
        assert sorted(saved.files) == ["0/features", "0/logits", "1/features", "1/logits"]
        assert saved["1/logits"].tobytes() == raw.run(None, {"x": samples[1]})[0].tobytes()
    assert cli_main.main(["bench", str(model), "--backend", "cpu", "--inputs", str(folder),
                          "--iterations", "2", "--warmup", "0", "--no-onnxruntime"]) == 0
    assert "x: float32[1,3,8,8]" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", samples[0])
    with caplog.at_level(logging.WARNING):
        assert cli_main.main(["run", str(model), "--backend", "cpu", "--input",
                              f"x={tmp_path / 'x.npy'}"]) == 0
    assert "--input NAME=FILE is deprecated" in caplog.text


def test_run_with_an_unknown_input_name_is_a_user_error(model, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    code = cli_main.main(["run", str(model), "--backend", "cpu", "--input",
                          f"y={tmp_path / 'x.npy'}"])
    assert code == 2
    assert "error[bad-input-argument]: --input names 'y'" in capsys.readouterr().err


def test_image_input_without_opencv_names_the_extra(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)  # as on a board without OpenCV
    (tmp_path / "frame.png").write_bytes(b"not really a png")
    code = cli_main.main(["run", str(model), "--backend", "cpu", "--input",
                          f"x={tmp_path / 'frame.png'}"])
    assert code == 2
    assert "pip install 'edgefuse[vision]'" in capsys.readouterr().err


def test_bench_writes_json_with_every_runner(model, tmp_path, capsys):
    report = tmp_path / "bench.json"
    code = cli_main.main(["bench", str(model), "--backend", "cpu", "--iterations", "10",
                          "--warmup", "1", "--json", str(report)])
    assert code == 0
    data = json.loads(report.read_text())
    assert data["backend"] == "cpu" and data["batch"] == 1
    assert set(data["results"]) == {"edgefuse/cpu", "onnxruntime/cpu"}
    stats = data["results"]["edgefuse/cpu"]
    assert stats["runs"] == 10 and stats["p50_ms"] <= stats["p99_ms"]
    assert "edgefuse/cpu" in capsys.readouterr().out


@pytest.mark.torch
def test_bench_compares_with_pytorch_eager(model):
    torch = optional("torch")
    report = bench(model, "cpu", iterations=5, warmup=0, compare_onnxruntime=False,
                   torch_model=torch.nn.Conv2d(3, 4, 3).eval())
    assert set(report.results) == {"edgefuse/cpu", "pytorch-eager/cpu"}
    assert report.unavailable == {}
    assert "x edgefuse's p50" in report.render()


@pytest.mark.torch
def test_an_unknown_torch_source_is_the_users_error(model):
    optional("torch")
    with pytest.raises(InputError, match="unknown model 'no-such-model'"):
        bench(model, "cpu", iterations=2, warmup=0, torch_model="no-such-model")


def test_an_om_alone_has_no_onnxruntime_to_compare_with(tmp_path, monkeypatch):
    from edgefuse.model_source import ModelSource

    source = ModelSource("only.om", None, None, None)
    monkeypatch.setattr("edgefuse.benchmark.open_session",
                        lambda *a, **k: OrtSession(conv_net(), "cpu", validate=False))
    report = bench(source, "cpu", iterations=2, warmup=0)
    assert "OM only" in report.unavailable["onnxruntime"]


def test_bench_batch_fills_a_dynamic_batch(tmp_path):
    path = save(two_input_model(), tmp_path / "two.onnx")
    report = tmp_path / "bench.json"
    assert cli_main.main(["bench", str(path), "--backend", "cpu", "--batch", "4",
                          "--seconds", "0.05", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["batch"] == 4 and data["inputs"] == {"a": "float32[4,4]", "b": "float32[4,4]"}


def test_doctor_lists_providers_and_backends(tmp_path, capsys):
    assert cli_main.main(["doctor", "--json", str(tmp_path / "env.json")]) == 0
    printed = capsys.readouterr().out
    assert "ort providers" in printed and "ok cpu" in printed
    assert "the sim backend does not simulate (docs/sim.md):\n  - speed:" in printed
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["backends"]["cpu"]["ok"] is True
    assert set(data["backends"]) == {"acl", "tensorrt", "cuda", "cpu", "sim"}
    assert any("speed" in item for item in data["sim_does_not_simulate"])


@pytest.mark.parametrize(
    ("version", "shown"),
    [(None, "no CANN version to compare"), ("7.0.RC1", "CANN 7.0.RC1 builds them"),
     ("8.5.0", "CANN 8.5.0 is outside it: `edgefuse ops build` refuses it")],
)
def test_doctor_states_the_cann_range_of_the_op_packages(monkeypatch, tmp_path, capsys, version,
                                                         shown):
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    if version is None:
        monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    else:
        info = tmp_path / "x86_64-linux" / "ascend_toolkit_install.info"
        info.parent.mkdir()
        info.write_text(f"version={version}\n")
        monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    assert cli_main.main(["doctor", "--json", str(tmp_path / "env.json")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "op packages" in x)
    assert "target CANN 6.0 up to, not including, 8.5" in line and shown in line
    facts = json.loads((tmp_path / "env.json").read_text())["facts"]
    assert facts["op packages"].startswith("target CANN 6.0")


def test_latency_stats_and_progress():
    stats = latency_stats([0.001] * 98 + [0.002, 0.010], batch=4)
    assert stats.p50_ms == pytest.approx(1.0)
    assert stats.runs == 100 and stats.min_ms == pytest.approx(1.0)
    assert stats.p99_ms > stats.p90_ms == pytest.approx(1.0)
    assert stats.throughput == pytest.approx(4 * 1000 / stats.mean_ms)
    stream = io.StringIO()
    bar = Progress(4, enabled=True, stream=stream, width=8)
    bar.advance(2, "edgefuse/cpu")
    bar.close()
    assert "[####....]  50% edgefuse/cpu" in stream.getvalue()


def test_random_inputs_fill_the_batch_and_refuse_what_cannot_be_guessed():
    dynamic = TensorSpec("a", ("N", 4), np.dtype(np.float32))
    assert random_feeds([dynamic], batch=3)["a"].shape == (3, 4)
    assert random_feeds([dynamic])["a"].shape == (1, 4)
    frame = random_feeds([TensorSpec("f", (1, 2, 2, 3), np.dtype(np.uint8))])["f"]
    assert frame.dtype == np.uint8
    with pytest.raises(InputError, match="fixed batch of 1, not 4"):
        random_feeds([X], batch=4)
    with pytest.raises(InputError, match=r"dynamic dimension 2 \('H'\)"):
        random_feeds([TensorSpec("img", (1, 3, "H", "W"), np.dtype(np.float32))])


def test_input_arguments_and_files(tmp_path):
    assert parse_input_args(["x.npy"], [X]) == {"x": Path("x.npy")}
    assert parse_input_args(["x=a=b.npy"], [X]) == {"x": Path("a=b.npy")}
    two = [X, TensorSpec("y", (1,), np.dtype(np.float32))]
    with pytest.raises(InputError, match="does not say which input"):
        parse_input_args(["x.npy"], two)
    with pytest.raises(InputError, match="gives 'x' twice"):
        parse_input_args(["x=a.npy", "x=b.npy"], two)
    np.save(tmp_path / "f64.npy", np.ones((1, 3, 8, 8)))
    assert load_input(X, tmp_path / "f64.npy").dtype == np.float32
    np.savez(tmp_path / "bundle.npz", x=np.ones((1, 3, 8, 8), np.float32), other=np.ones(2))
    assert load_input(X, tmp_path / "bundle.npz").shape == (1, 3, 8, 8)
    np.save(tmp_path / "ints.npy", np.ones((1, 3, 8, 8), np.int64))
    with pytest.raises(InputError, match=r"input 'x' expects float32\[1,3,8,8\], got int64"):
        load_input(X, tmp_path / "ints.npy")
