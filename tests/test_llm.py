"""Text generation (issue: on-device LLMs through the same pipeline): a tiny checkpoint of
Gemma 3's architecture (2 layers) with a tokenizer, exported through the real run and
checked from outside: the program decodes what eager transformers decodes."""

import contextlib
import json
from pathlib import Path

import pytest
from conftest import written
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus

MAX_SEQ_LEN = 48


def tiny_checkpoint(directory: Path, config=None) -> Path:
    """config.json of a 2-layer model (default: Gemma 3, sliding and full attention) and a
    word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Gemma3TextConfig, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    (config or Gemma3TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=1024, sliding_window=256,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16,
        bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )).save_pretrained(directory)
    words = ["<pad>", "<eos>", "<bos>", "<unk>", *sorted({w.strip(".,:").lower() for w in
                                                         "The lighthouse keeper climbed the spiral stairs every evening".split()})]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from pteforge.cli import main

    root = tmp_path_factory.mktemp("llm")
    ckpt = tiny_checkpoint(root / "tiny-gemma")
    out = root / "out"
    code = main(["export", "--llm", str(ckpt), "--weights", "none", "--max-seq-len", str(MAX_SEQ_LEN),
                 "--backends", "xnnpack", "xnnpack:8da4w", "coreml", "mlx", "vulkan", "--oplist", "--out", str(out)])
    manifest = json.loads((out / "index.json").read_text())
    return code, ckpt, out, {m["target"]: m for m in written(manifest)}, manifest


@pytest.mark.slow
def test_fp32_program_decodes_what_eager_transformers_decodes(exported):
    """The proof says so, and so does a check from outside it: the .pte, driven as a runner
    drives it (prefill, then one token per call with its cache position), gives eager's
    greedy tokens for a prompt the proof never saw."""
    import torch

    from pteforge.runtime.host import load_runtime
    from pteforge.families.text import build, llm_spec

    _, ckpt, out, entries, _ = exported
    entry = entries["xnnpack"]
    assert entry["status"] == "VERIFIED", entry.get("reason")
    proof = entry["generation"]
    assert proof["tokenAgreement"] == 1.0 and proof["tokens"] == proof["eagerTokens"]
    assert len(proof["sqnrDbPerStep"]) == proof["steps"] == 16 and proof["minSqnrDb"] >= 40
    assert proof["perplexity"]["tokenizedWith"] == "the model's tokenizer"
    assert proof["decodeTokensPerSecond"] > 0 and proof["prefillTokensPerSecond"] > 0 and proof["peakRssMb"] > 0

    model = build(llm_spec(str(ckpt), MAX_SEQ_LEN), "none", 0)  # the same seeded weights
    prompt = [2, 40, 41, 7, 300, 12]
    with torch.no_grad():
        eager = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False,
                               eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    program = load_runtime().load_program((out / entry["file"]).read_bytes())  # with the llama:: kernels
    method = program.load_method("forward")
    assert program.load_method("get_max_seq_len").execute([])[0] == MAX_SEQ_LEN
    assert program.load_method("use_sdpa_with_kv_cache").execute([])[0] is False  # attention is XNNPACK's matmuls
    logits = method.execute([torch.tensor([prompt]), torch.arange(len(prompt))])[0]
    assert tuple(logits.shape) == (1, 1, 512), "prefill returns the last position's logits: the output matrix runs once"
    tokens = [int(logits[0, -1].argmax())]
    for step in range(9):
        logits = method.execute([torch.tensor([[tokens[-1]]]), torch.tensor([len(prompt) + step])])[0]
        tokens.append(int(logits[0, -1].argmax()))
    assert tokens == eager


@pytest.mark.slow
def test_the_cpu_program_writes_its_cache_in_place_and_says_what_to_link(exported):
    """XNNPACK's program writes its cache in place with ExecuTorch's llama::update_cache and
    attends inside XNNPACK (matmuls and a softmax: llama::custom_sdpa was a quarter to a third
    of each decoded token); the RMSNorms inside XNNPACK too, so the graph is cut only around
    the cache writes; and the link lines name the library an app needs for them."""
    _, _, out, entries, _ = exported
    fp32 = entries["xnnpack"]["delegation"]
    assert "llama::update_cache.out" in fp32["kernels"] and "llama::custom_sdpa.out" not in fp32["kernels"]
    portable = [op["op"] for op in fp32["portable_ops"]]
    assert not any(op.startswith(("aten_mean", "aten_index_put", "aten_bmm", "aten__softmax")) for op in portable), portable
    cmake = (out / "executorch_link.cmake").read_text()
    assert "-DEXECUTORCH_BUILD_KERNELS_LLM=ON" in cmake and "WHOLE_ARCHIVE,custom_ops>" in cmake
    # the executorch_flutter app's builds do not link custom_ops: the file is not offered to it
    manifest = json.loads((out / "index.json").read_text())
    held = {e["target"]: e for e in manifest.get("notForApp", [])}
    assert "xnnpack" in held and held["xnnpack"]["platforms"] == [], manifest
    assert not any(e["target"] == "xnnpack" for e in manifest["models"])


@pytest.mark.slow
def test_manifest_entries_carry_what_a_runner_needs(exported):
    from pteforge.report.app import rejections

    code, _, out, entries, manifest = exported
    for target in ("xnnpack", "xnnpack:8da4w", "coreml"):
        e = entries[target]
        assert (e["category"], e["task"], e["modelName"].startswith("tiny-gemma")) == ("gemma", "text-generation", True)
        assert (e["maxSeqLen"], e["vocabSize"], e["bosId"], e["eosIds"]) == (MAX_SEQ_LEN, 512, 2, [1])
        for rel in [*e["tokenizer"]["files"], e["tokenizer"]["vocabFile"], e["tokenizer"]["configFile"]]:
            assert (out / rel).is_file(), rel
        assert [i["dtype"] for i in e["inputs"]] == ["int64", "int64"], "token ids and their position"
        assert [o["shape"][-1] for o in e["outputs"]] == [512], "logits over the vocabulary"
    assert "8da4w" in entries["xnnpack:8da4w"]["quantization"]["scheme"]
    assert entries["xnnpack:8da4w"]["relative"]["size"] < 0.5  # int4 linears, int8 embedding
    assert rejections(manifest) == [] and rejections(manifest, older=True) == []
    vocab = json.loads((out / entries["xnnpack"]["tokenizer"]["vocabFile"]).read_text())
    assert vocab["<bos>"] == 2  # the app's word-level vocabulary file
    tokenizer = entries["xnnpack"]["tokenizer"]  # the app's chat reads BPE only: a word-level one is said so
    assert tokenizer["model"] == "WordLevel" and "reads BPE tokenizers only" in tokenizer["appNote"]


@pytest.mark.slow
def test_quantized_proof_reports_agreement_and_perplexity_change(exported):
    _, _, _, entries, _ = exported
    e = entries["xnnpack:8da4w"]
    assert e["status"] in ("VERIFIED", "MISMATCH")
    proof = e["generation"]
    assert 0.0 <= proof["tokenAgreement"] <= 1.0 and proof["steps"] == 16
    assert proof["perplexity"]["program"] > 0 and proof["perplexity"]["changePercent"] is not None
    if e["status"] == "VERIFIED":
        assert proof["minSqnrDb"] >= proof["thresholdSqnrDb"]


@pytest.mark.slow
def test_core_ml_lowers_here_and_says_it_needs_a_device(exported):
    from pteforge.backends import default_registry

    _, _, out, entries, _ = exported
    if not default_registry().get("coreml").lower_check().ok:
        pytest.skip("coremltools cannot lower on this machine")
    e = entries["coreml"]
    assert e["status"] == "NOT_RUNNABLE_HERE" and e["delegation"]["nodes_per_backend"]
    assert (out / e["file"]).stat().st_size == e["size"]


@pytest.mark.slow
def test_mlx_lowers_a_language_model_here_with_what_the_apps_runner_calls(exported):
    """The executorch_flutter app's LLM runner takes XNNPACK and MLX programs: the MLX one is
    all MLX, carries the runner's constant methods, and needs a Mac to run."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    _, _, out, entries, _ = exported
    e = entries["mlx"]
    assert e["status"] == "NOT_RUNNABLE_HERE" and "MLXBackend" in e["reason"] and e["platforms"] == ["macos"]
    assert e["delegation"]["nodes_per_backend"]["MLXBackend"] > 0 and e["delegation"]["percent"] == 100.0
    program = deserialize_pte_binary((out / e["file"]).read_bytes())
    methods = {plan.name for plan in getattr(program, "program", program).execution_plan}
    assert {"forward", "get_eos_ids", "get_max_seq_len", "get_bos_id", "use_kv_cache"} <= methods


@pytest.mark.slow
def test_a_backend_without_a_language_model_export_is_one_unavailable_row(exported, capsys):
    code, _, _, entries, _ = exported
    assert "vulkan" not in entries and code == ExitStatus.TARGETS_FAILED  # requested, so the run says so


@pytest.mark.slow
def test_a_precision_a_language_model_is_not_exported_at_brings_no_fp32_reference(exported, capsys, tmp_path):
    """xnnpack:int8 is no language-model precision: its row is UNAVAILABLE, and the fp32
    program it would have been measured against is not made (it was: an unasked artifact
    under "Successfully exported 1/2"); a vision model asked the same gets both."""
    from pteforge.api import plan_targets
    from pteforge.run.plan import targets_of
    from pteforge.cli import main
    from pteforge.models.catalog import build_catalog

    _, ckpt, _, _, _ = exported
    out = tmp_path / "out"
    code = main(["export", "--llm", str(ckpt), "--weights", "none", "--max-seq-len", str(MAX_SEQ_LEN),
                 "--backends", "xnnpack:int8", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == ExitStatus.TARGETS_FAILED and "xnnpack:int8: UNAVAILABLE" in stdout and "Exported 0/1" in stdout, stdout
    assert not list(out.rglob("*.pte"))
    plan = plan_targets(["xnnpack:int8"])
    assert [t.name for t in targets_of(build_catalog().get("mobilenet_v3_small"), plan)] == ["xnnpack:int8", "xnnpack"]


@pytest.mark.slow  # three language models exported and decoded (~45 s)
def test_architectures_that_refuse_sdpa_or_route_to_experts_export_and_decode_as_eager(capsys, tmp_path):
    """Gemma 2 refuses attention through scaled_dot_product_attention (it was CAPTURE_FAILED),
    and transformers computes a mixture of experts with a CPU custom operator that no
    ExecuTorch runtime has (Qwen3-MoE was LOWER_FAILED, "Missing out variants:
    transformers::grouped_mm_fallback"). Both are built with kernels export can capture and
    their programs decode eager's greedy tokens."""
    from transformers import Gemma2Config, Qwen3MoeConfig

    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=512, bos_token_id=2, eos_token_id=1,
                  pad_token_id=0)
    gemma2 = tiny_checkpoint(tmp_path / "gemma2", Gemma2Config(**common, query_pre_attn_scalar=16, sliding_window=64))
    moe = tiny_checkpoint(tmp_path / "moe", Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2,
                                                            moe_intermediate_size=32))
    for file in moe.glob("*"):  # a checkpoint without its tokenizer: proven on bytes as token ids, and said
        if file.name != "config.json":
            file.unlink()
    code, stdout, _ = cli(capsys, "export", "--llm", gemma2, "--llm", moe, "--weights", "none", "--max-seq-len", 32,
                          "--backends", "xnnpack", "--out", tmp_path / "out")
    assert code == ExitStatus.OK, stdout
    entries = {m["model"]: m for m in written(tmp_path / "out" / "index.json")}
    for name in ("gemma2", "moe"):
        assert entries[name]["status"] == "VERIFIED", entries[name]
        assert entries[name]["generation"]["tokenAgreement"] == 1.0, entries[name]["generation"]
    assert entries["moe"]["generation"]["perplexity"]["tokenizedWith"] == "UTF-8 bytes as token ids (no tokenizer here)"
    assert "tokenizer" not in entries["moe"] and entries["gemma2"]["tokenizer"]["files"]
    lines = {name: [ln for ln in stdout.splitlines() if f"{name}_xnnpack.pte" in ln] for name in ("gemma2", "moe")}
    assert "no tokenizer shipped" in lines["moe"][0] and "no tokenizer" not in lines["gemma2"][0], lines


def test_a_model_transformers_does_not_build_for_text_generation_is_one_error_naming_it(capsys, tmp_path):
    """T5 (encoder-decoder) was a CAPTURE_FAILED quoting transformers' list of 189 classes."""
    from transformers import T5Config

    ckpt = tmp_path / "t5"
    T5Config(vocab_size=512, d_model=64, d_ff=128, num_layers=2, num_heads=4).save_pretrained(ckpt)
    code, _, err = cli(capsys, "export", "--llm", ckpt, "--weights", "none", "--max-seq-len", "32",
                       "--backends", "xnnpack", "--out", tmp_path / "o")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert "t5 (T5Config) is not a model transformers builds for text generation" in line, line
    assert "export other models with --model" in line


def test_max_seq_len_without_a_language_model_is_a_usage_error(capsys, tmp_path):
    code, _, err = cli(capsys, "export", "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16",
                       "--max-seq-len", "64", "--out", tmp_path / "o")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "--max-seq-len applies to language models" in line


@pytest.mark.parametrize("length", ["0", "-5"])
def test_a_max_seq_len_too_short_for_the_proof_is_refused_before_any_work(capsys, tmp_path, length):
    """``--max-seq-len 0`` was read as "not given" and exported the default 128."""
    code, _, err = cli(capsys, "export", "--llm", "org/some-llm", "--weights", "none", "--max-seq-len", length,
                       "--out", tmp_path / "o")
    assert code == ExitStatus.USAGE
    assert f"--max-seq-len {length} is too short for the proof" in error_lines(err)[0]
    assert not (tmp_path / "o").exists()


def test_an_llm_that_is_neither_a_directory_nor_an_id_is_a_usage_error(capsys, tmp_path):
    code, _, err = cli(capsys, "export", "--llm", "nothing-here", "--weights", "none", "--out", tmp_path / "o")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "--llm nothing-here" in line and not (tmp_path / "o").exists()


def test_a_special_token_outside_the_vocabulary_is_one_error_naming_it(capsys, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "bos_token_id": 50256}))  # GPT-2's, in a 512-token model
    code, _, err = cli(capsys, "export", "--llm", ckpt, "--weights", "none", "--max-seq-len", "32",
                       "--backends", "xnnpack", "--out", tmp_path / "o")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert "bos_token_id 50256 is outside the model's vocabulary (vocab_size 512)" in line


def test_a_local_checkpoint_whose_config_transformers_cannot_read_names_the_file(capsys, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "an_architecture_from_the_future", "vocab_size": 10}))
    code, _, err = cli(capsys, "export", "--llm", ckpt, "--weights", "none", "--backends", "xnnpack", "--out", tmp_path / "o")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert f"cannot read {ckpt / 'config.json'}" in line and "an_architecture_from_the_future" in line
    assert "hf download" not in line and "a newer architecture needs a newer transformers" in line, line


def test_a_tokenizer_that_gives_no_tokens_falls_back_to_bytes_and_says_so():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from pteforge.text.llm import text_ids

    empty = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab={}, merges=[])))
    assert empty("the lighthouse keeper")["input_ids"] == []
    ids, how = text_ids(empty, 512, 31)
    assert len(ids) == 31 and all(3 <= i < 512 for i in ids)
    assert how == "UTF-8 bytes as token ids (its tokenizer gave 0 token(s) for the text)"


@pytest.mark.slow
def test_validate_reruns_the_proof_against_the_rebuilt_eager_model(exported, capsys):
    _, _, out, _, _ = exported
    code, stdout, err = cli(capsys, "validate", "--models-dir", out)
    report = json.loads((out / "validation_report.json").read_text())
    rows = {r["target"]: r for r in report["files"]}
    assert rows["xnnpack"]["status"] == "VERIFIED" and rows["xnnpack"]["agreement"] == 1.0, rows["xnnpack"]
    assert rows["xnnpack"]["sqnr_db"] >= 40
    assert rows["coreml"]["status"] == "NOT_RUNNABLE_HERE"


def test_fused_attention_only_where_it_computes_what_the_model_does():
    """A window shorter than the cache, or soft-capped logits, keeps transformers' attention."""
    from transformers import Gemma2Config, Gemma3TextConfig

    from pteforge.text.kvcache import why_not

    gemma3 = Gemma3TextConfig(num_hidden_layers=2, sliding_window=256, layer_types=["sliding_attention", "full_attention"])
    assert why_not(gemma3, 256) is None
    assert "sliding window (256) is shorter than --max-seq-len 512" in why_not(gemma3, 512)
    assert why_not(Gemma2Config(num_hidden_layers=2, attn_logit_softcapping=50.0), 64) == "its attention soft-caps logits"


def tiny_gemma4(directory: Path) -> Path:
    """Gemma 4's text architecture, reduced (the app's chat model is Gemma 4 E2B): sliding and
    full layers of different head sizes, the later layers reusing the earlier ones' keys and
    values, per-layer input embeddings, a soft-capped output; eos [1, 106] as E2B's; and a
    byte-level BPE tokenizer.json, the kind the app's Dart tokenizer reads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Gemma4TextConfig, PreTrainedTokenizerFast

    from pteforge.text.llm import PERPLEXITY_TEXT

    directory.mkdir(parents=True, exist_ok=True)
    Gemma4TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=256, max_position_embeddings=1024,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_kv_shared_layers=2, hidden_size_per_layer_input=8, vocab_size_per_layer_input=512,
        use_double_wide_mlp=True, final_logit_softcapping=30.0, bos_token_id=2, eos_token_id=[1, 106], pad_token_id=0,
    ).save_pretrained(directory)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([PERPLEXITY_TEXT.read_text()], trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<pad>", "<eos>", "<bos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>",
                            pad_token="<pad>").save_pretrained(directory)
    return directory


@pytest.mark.slow  # three programs through the CLI, each proven by decoding (~2 min)
def test_gemma4_the_apps_chat_model_exports_decodes_as_eager_and_ships_a_tokenizer_the_app_reads(tmp_path):
    """Through the real command line: XNNPACK fp32 and 8da4w and MLX (what the app's models
    repo ships for its chat) lowered, fp32 decoding eager's greedy tokens, the runner's constant methods
    there (get_eos_ids [1, 106]), and the shipped tokenizer.json a BPE that round-trips text."""
    from tokenizers import Tokenizer

    from pteforge.cli import main
    from pteforge.runtime.host import load_runtime
    from pteforge.text.llm import PERPLEXITY_TEXT

    ckpt, out = tiny_gemma4(tmp_path / "tiny-gemma4"), tmp_path / "out"
    code = main(["export", "--llm", str(ckpt), "--weights", "none", "--max-seq-len", str(MAX_SEQ_LEN),
                 "--backends", "xnnpack", "xnnpack:8da4w", "mlx", "--out", str(out)])
    manifest = json.loads((out / "index.json").read_text())
    entries = {e["target"]: e for e in manifest["models"] + manifest.get("notForApp", []) + manifest.get("failed", [])}
    fp32 = entries["xnnpack"]
    mlx = entries["mlx"]  # the app's other chat backend: lowered here, run on a Mac
    assert mlx["status"] == "NOT_RUNNABLE_HERE" and mlx["delegation"]["nodes_per_backend"]["MLXBackend"] > 0
    assert fp32["status"] == "VERIFIED" and fp32["generation"]["tokenAgreement"] == 1.0, fp32.get("reason")
    assert entries["xnnpack:8da4w"]["status"] in ("VERIFIED", "MISMATCH") and code in (0, ExitStatus.TARGETS_FAILED)
    assert entries["xnnpack:8da4w"]["delegation"]["percent"] > 50
    program = load_runtime().load_program((out / fp32["file"]).read_bytes())
    assert list(program.load_method("get_eos_ids").execute([])) == [1, 106] == fp32["eosIds"]
    shipped = next(out / f for f in fp32["tokenizer"]["files"] if f.endswith("tokenizer.json"))
    assert fp32["tokenizer"]["model"] == "BPE" and "appNote" not in fp32["tokenizer"]
    tokenizer = Tokenizer.from_file(str(shipped))
    text = PERPLEXITY_TEXT.read_text()[:400]
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_a_model_too_large_for_this_machine_is_refused_before_any_work_with_the_figure(capsys, tmp_path):
    """Gemma 4 E2B (4.63 B parameters, 18.5 GB at fp32) on a machine with less memory than
    the estimate: one line with the figures, its own exit code, nothing written."""
    import psutil

    from pteforge.families.text import PEAK_PER_WEIGHT_BYTE, llm_spec, parameter_count

    params = parameter_count(llm_spec("gemma-4-e2b-it"))
    need = params * 4 * PEAK_PER_WEIGHT_BYTE
    if need <= psutil.virtual_memory().total:
        pytest.skip("this machine has the memory the estimate asks for")
    code, out, err = cli(capsys, "export", "--gemma", "gemma-4-e2b-it", "--weights", "none", "--out", tmp_path / "o")
    assert code == ExitStatus.RESOURCES, out + err
    [line] = error_lines(err)
    assert f"{params / 1e9:.2f} B parameters" in line and f"about {need / 1e9:.0f} GB" in line
    assert "PTEFORGE_SKIP_MEMORY_CHECK" in line and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_text_generation_family_is_one_file_through_the_same_pipeline(tmp_path):
    """A text-generation family is one file: dropped into a copy of the package (a 2-layer
    Llama, its architecture in the file, seeded weights), it is a flag and a catalog model,
    and its program goes through the same jobs and runner as every other model: lowered,
    decoding as eager does, under its own category, with no unproven file left behind."""
    import os
    import shutil
    import subprocess
    import sys
    import textwrap

    from conftest import ROOT

    shutil.copytree(ROOT / "pteforge", tmp_path / "pteforge", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pteforge" / "families" / "story.py").write_text(textwrap.dedent('''
        from .text import TextGenerationFamily


        class Story(TextGenerationFamily):
            word = "tinystory"
            category = "story"
            models = ("tiny-story",)
            model_help = "a 2-layer Llama"
            checkpoints = {"tiny-story": {"id": "example/tiny-story", "config": {
                "model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}}}
    '''))
    env, out = {**os.environ, "PYTHONPATH": str(tmp_path)}, tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "pteforge", "export", "--tinystory", "--weights", "none",
                          "--max-seq-len", str(MAX_SEQ_LEN), "--backends", "xnnpack", "xnnpack:8da4w", "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    entries = {e["target"]: e for e in written(out / "index.json")}
    assert set(entries) == {"xnnpack", "xnnpack:8da4w"}
    fp32 = entries["xnnpack"]
    assert (fp32["category"], fp32["task"], fp32["modelName"]) == ("story", "text-generation", "tiny-story")
    assert fp32["status"] == "VERIFIED" and fp32["generation"]["tokenAgreement"] == 1.0, fp32
    assert (fp32["vocabSize"], fp32["maxSeqLen"], fp32["eosIds"]) == (320, MAX_SEQ_LEN, [2])
    assert "8da4w" in entries["xnnpack:8da4w"]["quantization"]["scheme"]
    assert all((out / e["file"]).is_file() for e in entries.values())
    assert not [p.name for p in out.rglob("*") if "unproven" in p.name]


@pytest.mark.parametrize("shape, group, qmin, qmax, rows", [
    ((2600, 640), 32, -8, 7, 512),  # 8da4w: blocks of 512 rows, the last one short
    ((300, 96), 96, -128, 127, 64),  # int8 weights, one scale a row (8da8w's per-channel)
    ((64, 64), 32, -8, 7, 2048),  # fewer rows than a block
])
def test_the_scale_search_row_block_by_row_block_finds_torchaos_numbers(shape, group, qmin, qmax, rows):
    """The 8da4w capture's scale search (HQQ, scale only) over blocks of rows gives
    torchao's quantized values and scales bit for bit: random weights, a zero row and a
    zero group (no least-squares fit: the scale kept), a row of one value; and weights on
    the 4-bit grid, whose search stops at its first iteration (the early stop over all
    the blocks at once)."""
    import torch
    from torchao.quantization.quant_primitives import _choose_qparams_and_quantize_scale_only_hqq as torchao

    from pteforge.text.hqq import scale_only_hqq

    torch.manual_seed(7)
    w = torch.randn(shape) * 0.02
    w[3] = 0
    w[5, :group] = 0
    w[9] = 0.125
    grid = (torch.randint(qmin, qmax + 1, shape) * 0.01).float()
    for weights in (w, w.to(torch.bfloat16), grid):
        want = torchao(weights, [1, group], qmin, qmax)
        got = scale_only_hqq(weights, [1, group], qmin, qmax, rows=rows)
        assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_8da4w_weights_are_torchaos_with_the_row_block_search(monkeypatch):
    """The source transform (what the 8da4w capture runs) searches each linear layer's
    scales row block by row block, and quantizes them to torchao's very numbers."""
    import torch
    from executorch.extension.llm.export.quantize import quantize_model_

    from pteforge.core.spec import Precision
    from pteforge.text import hqq
    from pteforge.text.llm import quantize_source

    searched, row_blocks = [], hqq.scale_only_hqq
    monkeypatch.setattr(hqq, "scale_only_hqq", lambda w, *a, **k: searched.append(tuple(w.shape)) or row_blocks(w, *a, **k))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(96, 4100))
    model.config = type("Config", (), {"tie_word_embeddings": False})()
    model.get_input_embeddings = lambda: torch.nn.Embedding(8, 64)
    model.set_input_embeddings = lambda e: None
    ours = quantize_source(model, Precision.INT8_DYNAMIC_INT4)
    quantize_model_(model, qlinear_config="8da4w", skip_incompatible_shapes=True)
    assert searched == [(96, 64), (4100, 96)]
    for mine, theirs in zip(ours, model):
        assert torch.equal(mine.weight.qdata, theirs.weight.qdata) and torch.equal(mine.weight.scale, theirs.weight.scale)


@pytest.mark.slow
def test_the_cpu_program_reads_its_cache_through_views_not_copies(tmp_path, monkeypatch):
    """Each layer's cache is read by XNNPACK's products through reshapes of the buffer
    ``llama::update_cache`` writes. Left outside XNNPACK, they are views of that memory
    (``et_view``); inside, XNNPACK's static reshape copied the cache (four copies a layer,
    and a transpose). The same program computes the same logits either way."""
    import torch

    from pteforge.backends import default_registry
    from pteforge.patches import executorch_patches
    from pteforge.core.spec import Precision
    from pteforge.runtime.host import load_runtime
    from pteforge.families.text import build, llm_spec
    from pteforge.text.llm import _lower, exportable

    spec = llm_spec(str(tiny_checkpoint(tmp_path / "tiny-gemma")), MAX_SEQ_LEN)
    model = build(spec, "none", 0)
    backend = next(b for b in default_registry() if b.name == "xnnpack")
    reference = {"vocabSize": 512, "bosId": 2, "eosIds": [1]}

    def lowered():
        exported = exportable(model, spec, fused=True)
        _, program, delegation = _lower(exported, backend, Precision.FP32, spec, reference, lambda stage, fn: fn())
        views = next((op.count for op in delegation.portable_ops if op.op == "aten_view_copy_default"), 0)
        method = load_runtime().load_program(program).load_method("forward")
        prompt = [2, 40, 41, 7]
        logits = [method.execute([torch.tensor([prompt]), torch.arange(len(prompt))])[0]]
        for step in range(3):
            token = int(logits[-1][0, -1].argmax())
            logits.append(method.execute([torch.tensor([[token]]), torch.tensor([len(prompt) + step])])[0])
        return views, delegation.kernels, torch.cat(logits)

    views, kernels, logits = lowered()
    monkeypatch.setattr(executorch_patches, "views_of_written_buffers_outside", contextlib.nullcontext)
    copied_views, _, copied_logits = lowered()
    layers = model.config.num_hidden_layers
    assert views - copied_views == 4 * layers, "keys and values, two reshapes each, outside XNNPACK"
    assert "aten::view_copy.out" not in kernels, "outside XNNPACK, every reshape is a view of its buffer"
    torch.testing.assert_close(logits, copied_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # one language model exported and decoded (~40 s)
def test_a_static_cache_calls_only_kernels_the_app_links_and_is_offered_to_it(tmp_path):
    """The executorch_flutter app's builds do not link custom_ops: the in-place cache's
    llama::update_cache goes to notForApp (test above), and --llm-cache static makes a
    program of Hugging Face's static cache, in kernels its builds link, offered to it."""
    from pteforge.cli import main
    from pteforge.core.kernels import app_unlinked

    ckpt, out = tiny_checkpoint(tmp_path / "tiny-gemma"), tmp_path / "out"
    code = main(["export", "--llm", str(ckpt), "--weights", "none", "--max-seq-len", str(MAX_SEQ_LEN),
                 "--llm-cache", "static", "--backends", "xnnpack", "--out", str(out), "--bench-runs", "0"])
    manifest = json.loads((out / "index.json").read_text())
    [e] = manifest["models"]
    assert code == 0 and e["status"] == "VERIFIED" and e["generation"]["tokenAgreement"] == 1.0, e
    assert not any(k.startswith("llama::") for k in e["delegation"]["kernels"]), e["delegation"]["kernels"]
    assert app_unlinked(e["delegation"]["kernels"], e["task"]) is None and e["platforms"]
