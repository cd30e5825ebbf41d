"""Well-known architectures exported from torch with random weights, for ``bench/real_engine.py``.

Each model is built from a ``transformers`` configuration (or a plain ``torch.nn`` module for
the recurrent ones), initialised with seed 0, exported once with ``torch.onnx.export``
(TorchScript exporter, ``dynamo=False``: the dynamo exporter needs ``onnxscript``), opset 17,
then stamped IR version 8 (what the onnxruntime we compare with accepts). The export and its
inputs (``<name>.npz``, keyed by graph input name) are cached in ``SGLENS_BENCH_MODELS``
(default ``~/.cache/sglens-bench/models``); a cached pair is reused, never rebuilt.

Nothing here is needed by the tests: torch and transformers are the ``bench`` extra.

    python bench/torch_models.py [NAME ...]     # export what is missing, print the cache

``DYNAMO_OF`` names the architectures also exported by torch's default (dynamo) exporter, as
``<name>_dynamo``: opset 20 and IR 10 as it writes them, weights inlined from its ``.data`` file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

OPSET, IR = 17, 8
SEQ = 128        # text models: tokens per sequence
IMAGE = 224      # vision models: pixels per side


@dataclass(frozen=True)
class Export:
    name: str
    family: str
    about: str                  # architecture, configuration and input shapes, for the table in docs/bench.md
    build: Callable[[], tuple[Any, dict[str, np.ndarray]]]   # -> (torch module, inputs by name)


def cache_dir() -> Path:
    return Path(os.environ.get("SGLENS_BENCH_MODELS") or Path.home() / ".cache" / "sglens-bench" / "models")


# ------------------------------------------------------------------ builders --
def _tokens(rng: np.random.Generator, vocab: int, seq: int = SEQ) -> np.ndarray:
    return rng.integers(0, vocab, size=(1, seq)).astype(np.int64)


def _mask(seq: int = SEQ, valid: int = 100) -> np.ndarray:
    """A padded batch of one: the last tokens are padding, so the mask path is exercised."""
    mask = np.zeros((1, seq), np.int64)
    mask[:, :valid] = 1
    return mask


def _first_output(model: Any, names: tuple[str, ...]) -> Any:
    """A module taking ``names`` positionally and returning the transformers model's first output (hidden
    state or logits): one named output for the export."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args)), return_dict=False)[0]
    return FirstOutput()


def _hf(config_cls: str, model_cls: str, names: tuple[str, ...], **cfg: Any) -> Any:
    import torch
    import transformers
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**cfg)
    config._attn_implementation = "eager"   # the MatMul-Softmax-MatMul form most ONNX exports carry
    model = getattr(transformers, model_cls)(config).eval()
    return _first_output(model, names)


def bert() -> tuple[Any, dict]:
    rng = np.random.default_rng(0)
    names = ("input_ids", "attention_mask", "token_type_ids")
    m = _hf("BertConfig", "BertModel", names, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=1024, vocab_size=30522)
    return m, {"input_ids": _tokens(rng, 30522), "attention_mask": _mask(),
               "token_type_ids": np.zeros((1, SEQ), np.int64)}


def distilbert() -> tuple[Any, dict]:
    rng = np.random.default_rng(1)
    names = ("input_ids", "attention_mask")
    m = _hf("DistilBertConfig", "DistilBertModel", names, dim=256, n_layers=4, n_heads=4, hidden_dim=1024)
    return m, {"input_ids": _tokens(rng, 30522), "attention_mask": _mask()}


def gpt2() -> tuple[Any, dict]:
    rng = np.random.default_rng(2)
    names = ("input_ids", "attention_mask")
    m = _hf("GPT2Config", "GPT2Model", names, n_embd=256, n_layer=4, n_head=4, use_cache=False)
    return m, {"input_ids": _tokens(rng, 50257), "attention_mask": np.ones((1, SEQ), np.int64)}


def t5() -> tuple[Any, dict]:
    rng = np.random.default_rng(3)
    names = ("input_ids", "attention_mask", "decoder_input_ids")
    m = _hf("T5Config", "T5Model", names, d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_decoder_layers=4,
            num_heads=4, vocab_size=32128, use_cache=False)
    return m, {"input_ids": _tokens(rng, 32128), "attention_mask": _mask(),
               "decoder_input_ids": _tokens(rng, 32128, 16)}


def whisper_encoder() -> tuple[Any, dict]:
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                        decoder_layers=4, decoder_attention_heads=6, encoder_ffn_dim=1536,
                                        decoder_ffn_dim=1536, num_mel_bins=80)   # whisper-tiny's sizes
    config._attn_implementation = "eager"
    encoder = transformers.WhisperModel(config).get_encoder().eval()
    rng = np.random.default_rng(4)
    return _first_output(encoder, ("input_features",)), {
        "input_features": rng.standard_normal((1, 80, 3000)).astype(np.float32)}


def _image(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)}


def vit() -> tuple[Any, dict]:
    m = _hf("ViTConfig", "ViTModel", ("pixel_values",), hidden_size=192, num_hidden_layers=12,
            num_attention_heads=3, intermediate_size=768, image_size=IMAGE, patch_size=16)
    return m, _image(5)


def _he_init(module: Any) -> Any:
    """He normal on convs over their fan-in (per group: 9 for a depthwise 3x3), BatchNorm 1/0: what keeps the
    activations' scale through the layers of an untrained net whose BatchNorm (eval mode, running stats 0/1)
    does not normalise. transformers' MobileNetV2 draws conv weights from N(0, 0.02), under which they vanish
    over its 50+ layers (logits ~1e-22): a comparison against onnxruntime would then check nothing."""
    import torch
    for m in module.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_in")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)
    return module


def mobilenet_v2() -> tuple[Any, dict]:
    m = _hf("MobileNetV2Config", "MobileNetV2ForImageClassification", ("pixel_values",), num_labels=1000)
    return _he_init(m), _image(6)


def convnext() -> tuple[Any, dict]:
    return _hf("ConvNextConfig", "ConvNextForImageClassification", ("pixel_values",), num_labels=1000), _image(7)


def resnet18() -> tuple[Any, dict]:
    m = _hf("ResNetConfig", "ResNetForImageClassification", ("pixel_values",), layer_type="basic",
            depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], num_labels=1000)
    return m, _image(8)


def resnet50() -> tuple[Any, dict]:
    return _hf("ResNetConfig", "ResNetForImageClassification", ("pixel_values",), num_labels=1000), _image(9)


def wav2vec2() -> tuple[Any, dict]:
    """wav2vec2-base's convolutional feature encoder (7 Conv1d + GroupNorm/GELU) and a 2-layer transformer."""
    m = _hf("Wav2Vec2Config", "Wav2Vec2Model", ("input_values",), hidden_size=256, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=1024, do_stable_layer_norm=False)
    rng = np.random.default_rng(10)
    return m, {"input_values": rng.standard_normal((1, 16000)).astype(np.float32)}


def llama() -> tuple[Any, dict]:
    """A Llama decoder: RoPE, RMSNorm, grouped-query attention, a SiLU-gated MLP."""
    rng = np.random.default_rng(12)
    names = ("input_ids", "attention_mask")
    m = _hf("LlamaConfig", "LlamaModel", names, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=32000, use_cache=False)
    return m, {"input_ids": _tokens(rng, 32000), "attention_mask": np.ones((1, SEQ), np.int64)}


def bart() -> tuple[Any, dict]:
    rng = np.random.default_rng(13)
    names = ("input_ids", "attention_mask", "decoder_input_ids")
    m = _hf("BartConfig", "BartModel", names, d_model=256, encoder_layers=3, decoder_layers=3,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024,
            vocab_size=20000, use_cache=False)
    return m, {"input_ids": _tokens(rng, 20000), "attention_mask": _mask(),
               "decoder_input_ids": _tokens(rng, 20000, 16)}


def clip_text() -> tuple[Any, dict]:
    m = _hf("CLIPTextConfig", "CLIPTextModel", ("input_ids",), hidden_size=256, intermediate_size=1024,
            num_hidden_layers=4, num_attention_heads=4)
    return m, {"input_ids": _tokens(np.random.default_rng(14), 49408, 77)}


def swin() -> tuple[Any, dict]:
    """Swin-T's layout at half its width and two blocks a stage: shifted windows (Roll), patch merging."""
    return _hf("SwinConfig", "SwinModel", ("pixel_values",), embed_dim=48, depths=[2, 2, 2, 2],
               num_heads=[3, 6, 12, 24]), _image(15)


def segformer() -> tuple[Any, dict]:
    """SegFormer-B0 with its all-MLP decode head: efficient attention, Mix-FFN's depthwise convs,
    four bilinear upsamplings to a quarter of 256x256."""
    rng = np.random.default_rng(16)
    return (_hf("SegformerConfig", "SegformerForSemanticSegmentation", ("pixel_values",), num_labels=19),
            {"pixel_values": rng.standard_normal((1, 3, 256, 256)).astype(np.float32)})


def _calibrated(module: Any, inputs: dict[str, np.ndarray]) -> Any:
    """Every BatchNorm's running statistics taken from one forward pass over ``inputs``, as if
    trained on them: each normalises again. He initialisation alone keeps EfficientNet's
    activations from vanishing but lets them grow to ~4e4 through 16 blocks, where rounding
    is amplified until onnxruntime disagrees with itself (optimised against unoptimised
    graph: cosine 0.96) and no comparison means anything."""
    import torch
    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None   # a cumulative average: one pass sets them
        bn.train()
    with torch.no_grad():
        module(*(torch.from_numpy(v) for v in inputs.values()))
    for bn in bns:
        bn.eval()
    return module


def efficientnet() -> tuple[Any, dict]:
    """EfficientNet-B0: SiLU, squeeze-and-excitation, depthwise convs (He-initialised, BatchNorm
    calibrated on the input: see _calibrated)."""
    image = _image(17)
    # B0's coefficients: transformers' defaults are B7's (width 2.0, depth 3.1, 600 px)
    model = _hf("EfficientNetConfig", "EfficientNetModel", ("pixel_values",), width_coefficient=1.0,
                depth_coefficient=1.0, image_size=IMAGE, hidden_dim=1280)
    return _calibrated(_he_init(model), image), image


def mobilevit() -> tuple[Any, dict]:
    """MobileViT-S: MobileNetV2 blocks and transformers over unfolded patches (He-initialised)."""
    rng = np.random.default_rng(18)
    return (_he_init(_hf("MobileViTConfig", "MobileViTModel", ("pixel_values",))),
            {"pixel_values": rng.standard_normal((1, 3, 256, 256)).astype(np.float32)})


def detr() -> tuple[Any, dict]:
    """DETR over a ResNet-50 backbone (transformers' own, no timm), 2+2 layers, d_model 128, 50 queries."""
    import transformers
    rng = np.random.default_rng(19)
    m = _hf("DetrConfig", "DetrModel", ("pixel_values",), use_timm_backbone=False, use_pretrained_backbone=False,
            backbone=None, backbone_config=transformers.ResNetConfig(out_features=["stage4"]), d_model=128,
            encoder_layers=2, decoder_layers=2, num_queries=50)
    return m, {"pixel_values": rng.standard_normal((1, 3, 320, 320)).astype(np.float32)}


def _recurrent(kind: str) -> tuple[Any, dict]:
    import torch
    torch.manual_seed(0)

    class Tagger(torch.nn.Module):
        """80-dim features (a mel frame) -> 2-layer bidirectional RNN (hidden 256) -> 32 classes."""

        def __init__(self) -> None:
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(80, 256, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(512, 32)

        def forward(self, x: Any) -> Any:
            return self.head(self.rnn(x)[0])
    rng = np.random.default_rng(11)
    return Tagger().eval(), {"features": rng.standard_normal((1, 100, 80)).astype(np.float32)}


EXPORTS: dict[str, Export] = {e.name: e for e in (
    Export("bert_mini", "encoder", "BERT (BertModel, 4 layers, hidden 256, 4 heads, FFN 1024), ids/mask/types 1x128",
           bert),
    Export("distilbert", "encoder", "DistilBERT (4 layers, dim 256, 4 heads, FFN 1024), ids/mask 1x128", distilbert),
    Export("gpt2_small", "decoder", "GPT-2 (GPT2Model, 4 layers, n_embd 256, 4 heads, no cache), ids/mask 1x128",
           gpt2),
    Export("t5_small", "encoder-decoder", "T5 (T5Model, 4+4 layers, d_model 256, 4 heads, FFN 1024), encoder "
           "1x128, full decoder forward over 1x16 tokens", t5),
    Export("whisper_tiny_encoder", "speech", "Whisper-tiny encoder (4 layers, d_model 384, 6 heads), mel 1x80x3000",
           whisper_encoder),
    Export("vit_tiny", "vision-transformer", "ViT-Tiny (12 layers, hidden 192, 3 heads, patch 16), 1x3x224x224", vit),
    Export("mobilenet_v2", "mobile-cnn", "MobileNetV2 1.0, 1000 classes (He-initialised over the fan-in), 1x3x224x224",
           mobilenet_v2),
    Export("convnext_tiny", "convnext", "ConvNeXt-T, 1000 classes (depths 3-3-9-3, dims 96..768), 1x3x224x224",
           convnext),
    Export("resnet18", "resnet", "ResNet-18, 1000 classes (transformers ResNet, basic blocks), 1x3x224x224", resnet18),
    Export("resnet50", "resnet", "ResNet-50, 1000 classes (transformers' default ResNet config), 1x3x224x224",
           resnet50),
    Export("wav2vec2_small", "speech-conv", "wav2vec2 conv feature encoder (7 Conv1d, base sizes) + 2-layer "
           "transformer (hidden 256), 1 s of 16 kHz audio (1x16000)", wav2vec2),
    Export("llama", "decoder", "Llama (4 layers, hidden 256, 4 heads / 2 KV heads, SiLU-gated MLP 688, no cache), "
           "ids/mask 1x128", llama),
    Export("bart", "encoder-decoder", "BART (3+3 layers, d_model 256, 4 heads, FFN 1024), encoder 1x128, decoder "
           "1x16", bart),
    Export("clip_text", "encoder", "CLIP text encoder (4 layers, hidden 256, 4 heads, causal mask), ids 1x77",
           clip_text),
    Export("swin", "vision-transformer", "Swin (embed 48, depths 2-2-2-2, window 7, shifted windows), 1x3x224x224",
           swin),
    Export("segformer", "segmentation", "SegFormer-B0, 19 classes, logits at 1/4 of 1x3x256x256", segformer),
    Export("efficientnet_b0", "mobile-cnn", "EfficientNet-B0 (SiLU, squeeze-excite; He-initialised, BatchNorm "
           "calibrated on the input), 1x3x224x224",
           efficientnet),
    Export("mobilevit_s", "mobile-hybrid", "MobileViT-S (MobileNetV2 blocks + transformers over patches; "
           "He-initialised), 1x3x256x256", mobilevit),
    Export("detr", "detection", "DETR, ResNet-50 backbone, 2+2 layers, d_model 128, 50 queries, 1x3x320x320", detr),
    Export("gru_bidir", "recurrent", "torch GRU, 2 layers, bidirectional, hidden 256, 80 -> 32 classes, "
           "1x100x80", lambda: _recurrent("GRU")),
    Export("lstm_bidir", "recurrent", "torch LSTM, 2 layers, bidirectional, hidden 256, 80 -> 32 classes, "
           "1x100x80", lambda: _recurrent("LSTM")),
)}


#: Architectures also exported with torch's default exporter (``torch.onnx.export`` without
#: ``dynamo=False``, the default since torch 2.9, needing ``onnxscript``): what a user exporting
#: today gets -- opset 18 and up (20 with torch 2.14), IR 10, ONNX's own Gelu and
#: LayerNormalization, the attention masks of ``scaled_dot_product_attention``, and the weights in an
#: external ``.data`` file (inlined in the cached copy). Cached as ``<name>_dynamo``.
DYNAMO_OF = ("bert_mini", "whisper_tiny_encoder", "llama", "mobilenet_v2")


# ------------------------------------------------------------------- export --
def paths(name: str) -> tuple[Path, Path]:
    return cache_dir() / f"{name}.onnx", cache_dir() / f"{name}.npz"


def cached(name: str) -> tuple[Path, Path] | None:
    onnx_path, npz_path = paths(name)
    return (onnx_path, npz_path) if onnx_path.is_file() and npz_path.is_file() else None


def export(name: str) -> tuple[Path, Path]:
    """The cached export of ``name``, made now if missing (needs torch and transformers)."""
    import onnx
    import torch
    if (hit := cached(name)) is not None:
        return hit
    spec = EXPORTS[name]
    module, inputs = spec.build()
    onnx_path, npz_path = paths(name)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with tempfile.TemporaryDirectory(dir=onnx_path.parent, prefix=".export-") as tmp:
        raw = Path(tmp) / "raw.onnx"
        with torch.no_grad():
            torch.onnx.export(module, args, str(raw), opset_version=OPSET, dynamo=False,
                              input_names=list(inputs), output_names=["output"], do_constant_folding=True)
        model = onnx.load(str(raw))
        model.ir_version = IR
        onnx.checker.check_model(model)
        onnx.save_model(model, str(Path(tmp) / "m.onnx"))
        np.savez(Path(tmp) / "m.npz", **inputs)
        os.replace(Path(tmp) / "m.npz", npz_path)
        os.replace(Path(tmp) / "m.onnx", onnx_path)   # the model last: its presence means both are whole
    return onnx_path, npz_path


def export_dynamo(name: str) -> tuple[Path, Path]:
    """The cached export of ``name`` (one of ``DYNAMO_OF``) by torch's default exporter, as it writes
    it but for the weights, loaded from its ``.data`` file into the one cached file; made now if
    missing (needs torch, transformers and onnxscript)."""
    import onnx
    import torch
    if (hit := cached(f"{name}_dynamo")) is not None:
        return hit
    module, inputs = EXPORTS[name].build()
    module.eval()   # the default exporter traces the module as it is (the legacy one set eval mode)
    onnx_path, npz_path = paths(f"{name}_dynamo")
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with tempfile.TemporaryDirectory(dir=onnx_path.parent, prefix=".export-") as tmp:
        raw = Path(tmp) / "raw.onnx"
        with torch.no_grad():
            torch.onnx.export(module, args, str(raw), input_names=list(inputs), output_names=["output"])
        model = onnx.load(str(raw))   # with its external data, from the export's own folder
        onnx.save_model(model, str(Path(tmp) / "m.onnx"))
        np.savez(Path(tmp) / "m.npz", **inputs)
        os.replace(Path(tmp) / "m.npz", npz_path)
        os.replace(Path(tmp) / "m.onnx", onnx_path)
    return onnx_path, npz_path


if __name__ == "__main__":
    for key in sys.argv[1:] or [*EXPORTS, *(f"{n}_dynamo" for n in DYNAMO_OF)]:
        try:
            base = key.removesuffix("_dynamo")
            made = export_dynamo(base) if key != base else export(key)
            print(f"{made[0]}  {EXPORTS[base].about}", flush=True)
        except Exception as exc:  # noqa: BLE001 -- one failed export must not stop the others
            print(f"{key}: export failed: {type(exc).__name__}: {exc}", flush=True)
