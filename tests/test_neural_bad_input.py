"""Devices, own modules and Hugging Face directories: bad input is one line, exit 2.
(Bad image folders: tests/test_image_data.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import devices

BASE = ["run", "--method", "fedct", "--dataset", "digits", "--clients", "3", "--rounds", "1",
        "--period", "2", "--no-progress"]


def one_line_exit_2(capsys, args, message):
    code = main([*BASE, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:7"])
def test_cuda_without_cuda(tmp_path, capsys, device):
    one_line_exit_2(capsys, ["--model", "mlp(hidden=8)", "--device", device,
                             "--output", str(tmp_path / "x.json")],
                    f"device {device} asked for, but torch sees no CUDA GPU")


@pytest.mark.cuda
def test_a_gpu_index_beyond_the_visible_gpus(tmp_path, capsys):
    count = torch.cuda.device_count()
    one_line_exit_2(capsys, ["--model", "mlp(hidden=8)", "--device", f"cuda:{count}",
                             "--output", str(tmp_path / "x.json")],
                    f"torch sees {count} GPU")


def test_the_gpu_index_message_names_the_valid_ones(monkeypatch):
    # no second GPU here: the count torch would report is replaced, the logic is real
    monkeypatch.setattr(devices, "cuda_count", lambda: 1)
    with pytest.raises(FedLabelsError, match=r"torch sees 1 GPU \(cuda:0 to cuda:0\)"):
        devices.client_devices("cuda:7", 3)
    assert devices.client_devices("cuda", 3) == ["cuda:0"] * 3
    monkeypatch.setattr(devices, "cuda_count", lambda: 2)
    assert devices.client_devices("cuda", 5) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1",
                                                  "cuda:0"]  # round-robin
    assert devices.client_devices("cuda:1", 2) == ["cuda:1", "cuda:1"]


@pytest.mark.parametrize("args,message", [
    (["--device", "gpu"], "device must be one of auto, cpu, cuda, cuda:N"),
    (["--device", "cuda:x"], "device must be one of"),
    (["--precision", "fp8"], "precision must be one of fp32, bf16"),
    (["--model", "module:user_nets:wrong_width"],
     "outputs (2, 11) for a batch of 2; it must output (batch, n_classes) = (2, 10)"),
    (["--model", "module:user_nets:not_a_module"],
     "returned dict, not a torch.nn.Module"),
    (["--model", "module:user_nets:tiny_mlp(depth=3)"], "unknown parameter(s) depth"),
    # a factory of flat rows: augment=true was accepted and trained nothing differently
    (["--model", "module:user_nets:tiny_mlp(augment=true)"],
     "augment=true crops and flips images, but network user_nets:tiny_mlp takes flat rows"),
    (["--model", "cnn(arch=small,shape=3-8-8)"], "given shape=3-8-8, but the dataset's "
                                                  "images are 1-8-8"),
])
def test_bad_devices_and_modules(tmp_path, capsys, args, message):
    one_line_exit_2(capsys, [*args, "--output", str(tmp_path / "x.json")], message)


def test_toml_takes_device_and_precision(tmp_path):
    import json

    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "fedct"\ndataset = "digits"\nclients = 3\nmodel = "cnn"\n'
                   'rounds = 1\nperiod = 2\ndevice = "cpu"\nprecision = "bf16"\n')
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(cfg), "--output", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["device"] == "cpu" and data["device"]["precision"] == "bf16"
    cfg.write_text(cfg.read_text().replace('"cpu"', '"tpu"'))
    assert main(["run", "--config", str(cfg), "--output", str(out), "--overwrite",
                 "--no-progress"]) == 2


def test_a_hugging_face_directory_without_weights(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    one_line_exit_2(capsys, ["--model", f"hf(model_dir={tmp_path})",
                             "--output", str(tmp_path / "x.json")],
                    f"hf model_dir {tmp_path} has no weights")
    one_line_exit_2(capsys, ["--model", "hf(mode=full)", "--output", str(tmp_path / "x.json")],
                    "hf needs model_dir=PATH")
    (tmp_path / "pytorch_model.bin").write_bytes(b"a pickle")  # never unpickled
    one_line_exit_2(capsys, ["--model", f"hf(model_dir={tmp_path})",
                             "--output", str(tmp_path / "x.json")],
                    "its weights as pytorch_model.bin, a pickle, which fedlabels never loads")


def test_a_hugging_face_directory_with_a_slow_tokenizer_only(tmp_path, capsys, monkeypatch):
    # an older BERT checkpoint ships vocab.txt, no tokenizer.json: the message said only
    # "save the model and its fast tokenizer there"; it gives the line that writes it, and
    # that line works (run here as the user would)
    pytest.importorskip("transformers")
    import re

    hf = tmp_path / "bert"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert"}')
    (hf / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ngood\nbad\n")
    code = main([*BASE, "--model", f"hf(model_dir={hf})", "--output", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"hf model_dir {hf} has no tokenizer.json; it has the slow tokenizer's vocab.txt: " \
           "write the fast one once with python -c" in err
    (line,) = re.findall(r'python -c "([^"]+)"', err)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = {f.name: f.read_bytes() for f in hf.iterdir()}
    exec(line, {})  # the line as the user would paste it
    assert (hf / "tokenizer.json").is_file()
    # it adds tokenizer.json alone: save_pretrained(DIR) also rewrote the user's files
    assert {f.name: f.read_bytes() for f in hf.iterdir() if f.name != "tokenizer.json"} \
        == before
    one_line_exit_2(capsys, ["--model", f"hf(model_dir={hf})",
                             "--output", str(tmp_path / "x.json")],
                    f"hf model_dir {hf} has no weights")  # the next thing it lacks


def test_the_conversion_of_pytorch_model_bin_leaves_the_users_directory_as_it_was(
        tmp_path, capsys, monkeypatch):
    # the advice was AutoModel.from_pretrained(DIR).save_pretrained(DIR, ...), which
    # rewrote the user's config.json (as BertModel) in place; it writes a new directory now,
    # and that line works (run here as the user would)
    pytest.importorskip("transformers")
    import re

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification

    hf = tmp_path / "bert"
    hf.mkdir()
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3,
                                      "good": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(hf / "tokenizer.json"))
    config = BertConfig(vocab_size=5, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16,
                        max_position_embeddings=16, num_labels=2)
    config.save_pretrained(str(hf))
    torch.save(BertForSequenceClassification(config).state_dict(), hf / "pytorch_model.bin")
    before = {p.name: p.read_bytes() for p in hf.iterdir()}
    code = main([*BASE, "--model", f"hf(model_dir={hf})", "--output", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "a pickle, which fedlabels never loads" in err
    (line,) = re.findall(r'python -c "([^"]+)"', err)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(line, {})  # the line as the user would paste it
    assert {p.name: p.read_bytes() for p in hf.iterdir()} == before  # byte for byte
    new = tmp_path / "bert-safetensors"
    assert f"give model_dir={new}." in err
    with pytest.raises(FileExistsError):  # run twice, it writes over nothing
        exec(line, {})
    from fedlabels.learners.text_encoder import load_base
    from fedlabels.learners.transformer import check_hf

    check_hf({"model_dir": str(new)})
    loaded = dict(load_base(new).model.named_parameters())
    saved = torch.load(hf / "pytorch_model.bin", weights_only=True)
    assert torch.equal(loaded["embeddings.word_embeddings.weight"],
                       saved["bert.embeddings.word_embeddings.weight"])


def test_a_shape_other_than_the_datasets_images_is_refused(tmp_path, capsys):
    # digits records its images as 1x8x8: 1-4-16 (also 64 pixels) was taken silently, so
    # the network saw each image cut in two halves side by side
    one_line_exit_2(capsys, ["--model", "cnn(arch=small,shape=1-4-16)",
                             "--output", str(tmp_path / "x.json")],
                    "network small was given shape=1-4-16, but the dataset's images are "
                    "1-8-8 (C-H-W)")
    assert not (tmp_path / "x.json").exists()
    assert main([*BASE, "--model", "cnn(arch=small,shape=1-8-8)",
                 "--output", str(tmp_path / "y.json")]) == 0


@pytest.mark.parametrize("method", ["fedavg", "fedct"])
def test_a_network_without_trainable_parameters(tmp_path, capsys, method):
    # FedAvg built the server's initial weights with Adam, which raised "optimizer got an
    # empty parameter list" as a traceback (exit 1); FedCT named TorchNetClassifier only
    code = main([*BASE, "--method", method, "--model", "module:user_nets:no_weights",
                 "--output", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "network user_nets:no_weights has no trainable parameters" in err


def test_a_factory_that_needs_an_argument_the_spec_does_not_give(tmp_path, capsys):
    # it was a line naming TorchNetClassifier and "needs_depth() missing 1 required
    # positional argument: 'depth'", after the data was loaded; now the spec is refused
    one_line_exit_2(capsys, ["--model", "module:user_nets:needs_depth(lr=0.01)",
                             "--output", str(tmp_path / "x.json")],
                    "model factory module:user_nets:needs_depth needs depth, which the "
                    "learner does not pass")
    one_line_exit_2(capsys, ["--model", "module:user_nets:needs_depth(lr=0.01)",
                             "--output", str(tmp_path / "x.json")],
                    "give it in the spec: module:user_nets:needs_depth(lr=0.01,depth=...)")
    assert main([*BASE, "--model", "module:user_nets:needs_depth(depth=1)",
                 "--output", str(tmp_path / "y.json")]) == 0


def test_torch_model_with_a_factory_that_needs_an_argument():
    import functools

    import fedlabels as fl
    from fedlabels.learners.torch_net import TorchNetClassifier
    from user_nets import needs_depth

    with pytest.raises(FedLabelsError, match=r"needs depth, .* pass functools.partial\("
                                             r"needs_depth, depth=\.\.\.\)"):
        fl.TorchModel(needs_depth)
    fl.TorchModel(functools.partial(needs_depth, depth=1))  # given: accepted
    learner = TorchNetClassifier(network=needs_depth, n_classes=2, max_steps=1)
    with pytest.raises(FedLabelsError, match="model factory user_nets:needs_depth needs depth"):
        learner.fit(np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1]))


@pytest.mark.parametrize("source,message", [
    # a module that imports a package not installed was said not to be found itself
    ("import fedlabels_not_installed_xyz\n",
     "failed: it imports 'fedlabels_not_installed_xyz', which is not installed here"),
    # any other error in the module's code was a traceback (exit 1)
    ("def f(:\n", "failed: SyntaxError: invalid syntax ("),
    ("import torch\n\nx = undefined_name\n",
     "failed: NameError: name 'undefined_name' is not defined ("),
    ("raise RuntimeError('no config file')\n", "failed: RuntimeError: no config file ("),
])
def test_a_module_whose_import_fails(tmp_path, capsys, monkeypatch, source, message):
    import zlib

    name = f"broken_user_nets_{zlib.crc32(source.encode())}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    one_line_exit_2(capsys, ["--model", f"module:{name}:make",
                             "--output", str(tmp_path / "x.json")],
                    f"importing '{name}' for model module:{name}:make {message}")
    if "not installed" not in message:  # the file and line, and how to see the traceback
        one_line_exit_2(capsys, ["--model", f"module:{name}:make",
                                 "--output", str(tmp_path / "x.json")],
                        f"{tmp_path / name}.py, line ")


def test_a_module_that_is_not_there(tmp_path, capsys):
    one_line_exit_2(capsys, ["--model", "module:no_such_user_nets:make",
                             "--output", str(tmp_path / "x.json")],
                    "cannot import 'no_such_user_nets' for model module:no_such_user_nets:make "
                    "(No module named 'no_such_user_nets'); put it on PYTHONPATH")


@pytest.mark.parametrize("spec,fix", [
    # a file where the import name belongs: "cannot parse model spec", or for nets.py
    # "cannot import 'nets.py' ... (No module named 'nets.py'; 'nets' is not a package)"
    ("module:/home/me/lab/nets.py:make(hidden=8)",
     "names the file /home/me/lab/nets.py, but module: takes an import name: put its folder "
     "on the module path and give module:nets:make(hidden=8) (PYTHONPATH=/home/me/lab "),
    ("module:nets.py:make", "give module:nets:make (PYTHONPATH=. "),
    ("module:lab/nets:make", "give module:nets:make (PYTHONPATH=lab "),
])
def test_a_module_spec_that_names_a_file(tmp_path, capsys, spec, fix):
    one_line_exit_2(capsys, ["--model", spec, "--output", str(tmp_path / "x.json")], fix)


def test_a_module_in_the_current_directory_says_how_to_find_it(tmp_path, capsys,
                                                                monkeypatch):
    # the fedlabels command does not search the current directory (python -m does): the
    # user's nets.py beside them was "No module named ...; put it on PYTHONPATH" alone
    (tmp_path / "cwd_user_nets_q.py").write_text("def make(n_features, n_classes): pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    one_line_exit_2(capsys, ["--model", "module:cwd_user_nets_q:make",
                             "--output", str(tmp_path / "x.json")],
                    "(cwd_user_nets_q.py is in the current directory, which the fedlabels "
                    "command does not search: run PYTHONPATH=. fedlabels ..., or python -m "
                    "fedlabels ...)")


def test_a_misspelt_factory_gets_the_close_name(tmp_path, capsys):
    one_line_exit_2(capsys, ["--model", "module:user_nets:tiny_mpl",
                             "--output", str(tmp_path / "x.json")],
                    "module 'user_nets' has no 'tiny_mpl' (did you mean 'tiny_mlp'?)")


def test_a_network_too_large_for_memory(tmp_path, capsys):
    # torch's allocator failure came out as "client 0: model TorchNetClassifier failed to
    # fit ... RuntimeError: [enforce fail at alloc_cpu.cpp:127] ...", with the advice for
    # a client holding one class where it held one (as a small client may)
    one_line_exit_2(capsys, ["--model", "module:user_nets:too_big",
                             "--output", str(tmp_path / "x.json")],
                    "network user_nets:too_big for inputs of rows of 64 features does not "
                    "fit in memory (tried to allocate 256.0 TiB")


def test_a_training_step_that_runs_out_of_memory(tmp_path, capsys):
    code = main([*BASE, "--model", "module:user_nets:huge_activations", "--workers", "1",
                 "--output", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "model module:user_nets:huge_activations ran out of memory training on" in err
    assert "a smaller batch_size or network" in err and "one class" not in err


def test_what_an_allocation_failure_says():
    from fedlabels.core.errors import out_of_memory

    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                       "can't allocate memory: you tried to allocate 32768000000 bytes.")
    assert out_of_memory(cpu) == "tried to allocate 30.5 GiB"
    gpu = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB (GPU 0)")
    assert out_of_memory(gpu) == "tried to allocate 2.50 GiB"
    assert out_of_memory(MemoryError()) == "out of memory"
    assert out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert out_of_memory(ValueError("out of memory")) is None


@pytest.mark.parametrize("method", ["fedavg", "feddf", "fedct"])
def test_a_factory_that_raises(tmp_path, capsys, method):
    # FedAvg and FedDF build the server's network outside a client's fit: a traceback
    # (exit 1); the other methods named the client and TorchNetClassifier
    code = main([*BASE, "--method", method, "--model", "module:user_nets:buggy",
                 "--output", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "model factory user_nets:buggy raised ValueError: no layout for 64 features (" in err
    assert "user_nets.py, line " in err and "called with n_features=64, n_classes=10" in err
    import fedlabels as fl
    from user_nets import buggy

    with pytest.raises(FedLabelsError, match="model factory user_nets:buggy raised") as info:
        fl.run(method, "digits", model=fl.TorchModel(buggy), clients=3, rounds=1, period=2,
               progress=False)
    assert isinstance(info.value.__cause__, ValueError)  # Python keeps the traceback


@pytest.mark.parametrize("args,hint", [
    # --augment was "unrecognized arguments: --augment" alone; --batch-size 32 suggested
    # --batch-clients, a simulator setting
    (["--model", "cnn", "--augment"],
     "(--augment is a parameter of the model, not a flag: --model 'cnn(augment=true)')"),
    (["--model", "cnn(arch=small)", "--batch-size", "32"],
     "(--batch-size is a parameter of the model, not a flag: --model "
     "'cnn(arch=small,batch_size=32)')"),
    (["--lr=0.01"], "(--lr is a parameter of the model, not a flag: --model 'mlp(lr=0.01)')"),
])
def test_a_model_parameter_given_as_a_flag_says_where_it_goes(capsys, args, hint):
    with pytest.raises(SystemExit) as stop:
        main([*BASE, *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and hint in err and "did you mean" not in err, err
    assert len(err.strip().splitlines()) == 1
