"""Speech workloads: Tacotron 2, WaveGlow (NVIDIA DeepLearningExamples) and RNN-T (MLPerf).

Plain torch definitions after the published architectures; none of the
installed libraries has them. WaveGlow counts on the meta device; the
recurrent models run on the CPU, where their many small per-step operators
run faster than the meta kernels.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, Probe, Recipe, configured

# LJSpeech 1.1 (keithito.com/LJ-Speech-Dataset): 13,100 clips, 1,308,678
# characters, mean clip 6.57 s at 22,050 Hz; mel hop 256 samples.
LJ_CHARS = 100
LJ_FRAMES = 566
LJ_SOURCE = (
    "LJSpeech 1.1 statistics (13,100 clips, 1,308,678 characters, mean clip 6.57 s): 100 characters and "
    "6.57 s * 22050 Hz / 256-sample hop = 566 mel frames per utterance"
)
# A training batch is padded to its longest utterance (TextMelCollate), and the teacher-forced decoder
# steps through every padded frame. LJSpeech's clips run from 1 to 10 s (its README), and a batch of a
# few dozen clips or more almost surely holds one near 10 s: 10 s * 22050 / 256 = 861 frames, and its
# text in proportion, 100 * 861 / 566 = 152 characters.
LJ_PADDED_FRAMES = 861
LJ_PADDED_CHARS = 152
LJ_PADDED_SOURCE = (
    "estimated: DeepLearningExamples' TextMelCollate pads a batch to its longest utterance and the decoder "
    "steps through every padded frame; LJSpeech's clips run to 10 s (its README: 'Clips vary in length from 1 "
    "to 10 seconds'), which a batch of a few dozen clips almost surely reaches: 10 s * 22050 / 256 = 861 "
    "frames, text in proportion (152 characters)"
)


class _Prenet(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(80, 256, bias=False), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(256, 256, bias=False), nn.ReLU(), nn.Dropout(0.5))  # fmt: skip


class _LocationAttention(nn.Module):
    """Location-sensitive attention (128 dims, 32 location filters of width 31)."""

    def __init__(self) -> None:
        super().__init__()
        self.query_layer = nn.Linear(1024, 128, bias=False)
        self.memory_layer = nn.Linear(512, 128, bias=False)
        self.v = nn.Linear(128, 1, bias=False)
        self.location_conv = nn.Conv1d(2, 32, 31, padding=15, bias=False)
        self.location_dense = nn.Linear(32, 128, bias=False)

    def forward(self, query, memory, processed_memory, weights_cat):
        location = self.location_dense(self.location_conv(weights_cat).transpose(1, 2))
        energies = self.v(torch.tanh(self.query_layer(query).unsqueeze(1) + location + processed_memory)).squeeze(2)
        weights = energies.softmax(dim=1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class Tacotron2(nn.Module):
    """Tacotron 2 (Shen et al. 2018, arXiv:1712.05884) as NVIDIA DeepLearningExamples trains it.

    148-symbol embedding of 512; encoder of three 5-wide conv layers (512,
    batch norm, ReLU) and a bidirectional LSTM (256 per direction);
    autoregressive decoder with teacher forcing, one 80-bin mel frame per
    step: prenet (two 256-unit layers, dropout 0.5), attention LSTM cell
    (1024), location-sensitive attention, decoder LSTM cell (1024), linear
    mel and stop-token projections; postnet of five 5-wide conv layers (512
    channels, tanh). Loss: MSE before and after the postnet plus stop-token
    BCE.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(148, 512)
        self.convolutions = nn.ModuleList(
            nn.Sequential(nn.Conv1d(512, 512, 5, padding=2), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5))
            for _ in range(3)
        )
        self.encoder_lstm = nn.LSTM(512, 256, bidirectional=True, batch_first=True)
        self.prenet = _Prenet()
        self.attention_rnn = nn.LSTMCell(256 + 512, 1024)
        self.attention = _LocationAttention()
        self.decoder_rnn = nn.LSTMCell(1024 + 512, 1024)
        self.linear_projection = nn.Linear(1024 + 512, 80)
        self.gate_layer = nn.Linear(1024 + 512, 1)
        channels = [80, 512, 512, 512, 512, 80]
        self.postnet = nn.ModuleList(
            nn.Sequential(nn.Conv1d(i, o, 5, padding=2), nn.BatchNorm1d(o)) for i, o in zip(channels[:-1], channels[1:])
        )
        self.dropout = nn.Dropout(0.1)

    def forward(self, text: torch.Tensor, mel_target: torch.Tensor):
        x = self.embedding(text).transpose(1, 2)
        for conv in self.convolutions:
            x = conv(x)
        memory = self.encoder_lstm(x.transpose(1, 2))[0]  # (B, N, 512)
        b, n = memory.shape[:2]
        processed_memory = self.attention.memory_layer(memory)
        frames = mel_target.shape[2]
        go = memory.new_zeros(b, 1, 80)
        decoder_inputs = self.prenet(torch.cat([go, mel_target.transpose(1, 2)[:, :-1]], dim=1))
        att_h = att_c = dec_h = dec_c = memory.new_zeros(b, 1024)
        weights = cum_weights = memory.new_zeros(b, n)
        context = memory.new_zeros(b, 512)
        mels, gates = [], []
        for t in range(frames):
            att_h, att_c = self.attention_rnn(torch.cat([decoder_inputs[:, t], context], 1), (att_h, att_c))
            att_h = self.dropout(att_h)
            context, weights = self.attention(
                att_h, memory, processed_memory, torch.stack([weights, cum_weights], dim=1)
            )
            cum_weights = cum_weights + weights
            dec_h, dec_c = self.decoder_rnn(torch.cat([att_h, context], 1), (dec_h, dec_c))
            dec_h = self.dropout(dec_h)
            out = torch.cat([dec_h, context], 1)
            mels.append(self.linear_projection(out))
            gates.append(self.gate_layer(out))
        mel = torch.stack(mels, dim=2)
        post = mel
        for i, conv in enumerate(self.postnet):
            post = conv(post)
            post = F.dropout(torch.tanh(post) if i < len(self.postnet) - 1 else post, 0.5, self.training)
        return mel, mel + post, torch.cat(gates, dim=1)


def _tacotron2_probe() -> Probe:
    def make_batch(b: int):
        text = torch.randint(0, 148, (b, LJ_PADDED_CHARS))
        mel = torch.randn(b, 80, LJ_PADDED_FRAMES)
        gate = torch.zeros(b, LJ_PADDED_FRAMES)
        return text, mel, gate

    def loss(m: nn.Module, batch):
        text, mel, gate = batch
        mel_out, mel_post, gate_out = m(text, mel)
        return F.mse_loss(mel_out, mel) + F.mse_loss(mel_post, mel) + F.binary_cross_entropy_with_logits(gate_out, gate)

    return Probe(Tacotron2(), make_batch, loss)


class _WN(nn.Module):
    """WaveNet-like affine-coupling network: 8 dilated layers of ``channels``, mel-conditioned."""

    def __init__(self, n_in: int, n_mel: int, channels: int, layers: int = 8) -> None:
        super().__init__()
        self.channels = channels
        self.start = nn.Conv1d(n_in, channels, 1)
        self.cond_layer = nn.Conv1d(n_mel, 2 * channels * layers, 1)
        self.in_layers = nn.ModuleList(
            nn.Conv1d(channels, 2 * channels, 3, dilation=2**i, padding=2**i) for i in range(layers)
        )
        self.res_skip = nn.ModuleList(
            nn.Conv1d(channels, 2 * channels if i < layers - 1 else channels, 1) for i in range(layers)
        )
        self.end = nn.Conv1d(channels, 2 * n_in, 1)

    def forward(self, audio: torch.Tensor, spect: torch.Tensor) -> torch.Tensor:
        c = self.channels
        audio = self.start(audio)
        cond = self.cond_layer(spect)
        output = torch.zeros_like(audio)
        for i, (in_layer, res_skip) in enumerate(zip(self.in_layers, self.res_skip)):
            z = in_layer(audio) + cond[:, 2 * c * i : 2 * c * (i + 1)]
            acts = torch.tanh(z[:, :c]) * torch.sigmoid(z[:, c:])
            rs = res_skip(acts)
            if i < len(self.in_layers) - 1:
                audio = audio + rs[:, :c]
                output = output + rs[:, c:]
            else:
                output = output + rs
        return self.end(output)


class WaveGlow(nn.Module):
    """WaveGlow (Prenger et al. 2019, arXiv:1811.00002) as NVIDIA DeepLearningExamples trains it.

    80-bin mel upsampled by a 1024-wide, stride-256 transposed convolution;
    audio grouped by 8; 12 flows of an invertible 1x1 convolution and an
    affine coupling whose WN has 8 layers of 512 channels (the example's
    --wn-channels default); 2 channels leave early every 4 flows. Loss: the
    flow's negative log-likelihood with sigma 1.
    """

    def __init__(self, channels: int = 512) -> None:
        super().__init__()
        self.upsample = nn.ConvTranspose1d(80, 80, 1024, stride=256)
        remaining = 8
        self.convinv = nn.ParameterList()
        self.wn = nn.ModuleList()
        for k in range(12):
            if k % 4 == 0 and k > 0:
                remaining -= 2
            self.convinv.append(nn.Parameter(torch.linalg.qr(torch.randn(remaining, remaining))[0]))
            self.wn.append(_WN(remaining // 2, 80 * 8, channels))

    def forward(self, mel: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        b, samples = audio.shape
        spect = self.upsample(mel)[:, :, :samples]
        spect = spect.unfold(2, 8, 8).permute(0, 2, 1, 3).reshape(b, samples // 8, -1).permute(0, 2, 1)
        audio = audio.unfold(1, 8, 8).permute(0, 2, 1)
        outputs, log_s_total, log_det_total = [], 0.0, 0.0
        for k, (weight, wn) in enumerate(zip(self.convinv, self.wn)):
            if k % 4 == 0 and k > 0:
                outputs.append(audio[:, :2])
                audio = audio[:, 2:]
            audio = F.conv1d(audio, weight.unsqueeze(2))
            log_det_total = log_det_total + b * audio.shape[2] * torch.linalg.slogdet(weight)[1]
            half = audio.shape[1] // 2
            out = wn(audio[:, :half], spect)
            log_s, shift = out[:, half:], out[:, :half]
            audio = torch.cat([audio[:, :half], torch.exp(log_s) * audio[:, half:] + shift], 1)
            log_s_total = log_s_total + log_s.sum()
        z = torch.cat([*outputs, audio], 1)
        return ((z * z).sum() / 2 - log_s_total - log_det_total) / z.numel()


WAVEGLOW_SEGMENT = 8000


def _waveglow_probe() -> Probe:
    frames = WAVEGLOW_SEGMENT // 256 + 1

    def make_batch(b: int):
        return torch.randn(b, 80, frames), torch.randn(b, WAVEGLOW_SEGMENT)

    def loss(m: nn.Module, batch):
        return m(*batch)

    return Probe(WaveGlow(), make_batch, loss)


class RNNT(nn.Module):
    """The MLPerf Training RNN-T (mlcommons/training rnn_speech_recognition, config baseline_v3-1023sp).

    Input: 80 log-mel features stacked 3 frames at a time (240 features at
    30 ms). Encoder: 2 LSTM layers of 1024, time-stacking by 2, 3 LSTM
    layers of 1024. Prediction network: 512-wide embedding of the 1,023
    sentencepieces and 2 LSTM layers of 512. Joint network: encoder and
    prediction outputs projected to 512, added over the (T, U+1) lattice,
    ReLU, dropout 0.3, linear to 1,024 classes (with blank).
    """

    classes = 1024

    def __init__(self) -> None:
        super().__init__()
        self.pre_rnn = nn.LSTM(240, 1024, num_layers=2, dropout=0.1)
        self.post_rnn = nn.LSTM(2048, 1024, num_layers=3, dropout=0.1)
        self.embed = nn.Embedding(self.classes - 1, 512)
        self.pred_rnn = nn.LSTM(512, 512, num_layers=2, dropout=0.3)
        self.joint_enc = nn.Linear(1024, 512)
        self.joint_pred = nn.Linear(512, 512)
        self.joint_out = nn.Linear(512, self.classes)
        self.dropout = nn.Dropout(0.3)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.pre_rnn(features)[0]  # (T, B, 1024)
        t, b, h = x.shape
        x = x.view(t // 2, 2, b, h).transpose(1, 2).reshape(t // 2, b, 2 * h)
        enc = self.post_rnn(x)[0].transpose(0, 1)  # (B, T/2, 1024)
        start = labels.new_zeros(1, b, 512, dtype=torch.float32)
        pred = self.pred_rnn(torch.cat([start, self.embed(labels.t())], 0))[0].transpose(0, 1)  # (B, U+1, 512)
        lattice = self.joint_enc(enc).unsqueeze(2) + self.joint_pred(pred).unsqueeze(1)
        return self.joint_out(self.dropout(F.relu(lattice)))  # (B, T/2, U+1, classes)


# LibriSpeech train-960 (Panayotov et al. 2015): 960.9 h over 281,241 utterances.
RNNT_SECONDS = 12.3
RNNT_FRAMES = 410  # 12.3 s at 10 ms hop, stacked and subsampled by 3
RNNT_TOKENS = 43


def _rnnt_probe() -> Probe:
    def make_batch(b: int):
        return torch.randn(RNNT_FRAMES, b, 240), torch.randint(0, RNNT.classes - 1, (b, RNNT_TOKENS))

    def loss(m: nn.Module, batch):
        features, labels = batch
        log_probs = m(features, labels).log_softmax(dim=-1)
        # Stand-in for the transducer loss: it reads the blank and label log-probabilities of the lattice.
        blank = log_probs[..., -1]
        label = log_probs[:, :, :-1, :].gather(3, labels[:, None, :, None].expand(-1, log_probs.shape[1], -1, 1))
        return -(blank.mean() + label.mean())

    return Probe(RNNT(), make_batch, loss)


DLE_TTS = "NVIDIA DeepLearningExamples PyTorch/SpeechSynthesis/Tacotron2"
LAMBDA_24GB = "lambdal/deeplearning-benchmark pytorch/scripts/config_v1/config_pytorch_24GB.sh"
_TACO_BYTES = LJ_PADDED_CHARS * INT64_BYTES + 81 * LJ_PADDED_FRAMES * FLOAT32_BYTES + 2 * INT64_BYTES
_WG_BYTES = (WAVEGLOW_SEGMENT + 80 * (WAVEGLOW_SEGMENT // 256 + 1)) * FLOAT32_BYTES
_RNNT_BYTES = int(RNNT_SECONDS * 16000) * FLOAT32_BYTES + RNNT_TOKENS * INT64_BYTES

RECIPES = [
    Recipe(
        name="tacotron2",
        aliases=("tacotron-2", "tacotron_2"),
        domain="speech",
        description=f"Tacotron 2 text-to-mel, LJSpeech, teacher-forced decoder over batches padded to {LJ_PADDED_FRAMES} "
        f"mel frames ({LJ_FRAMES} real frames and {LJ_CHARS} characters an utterance on average)",
        architecture=f"{DLE_TTS} tacotron2/model.py (Shen et al. 2018, arXiv:1712.05884), plain torch definition "
        "features.model_defs.speech.Tacotron2",
        build=_tacotron2_probe,
        device="cpu",  # thousands of small decoder-step operators run faster than their meta kernels
        batch_sizes=(1, 2),
        input_bytes_per_sample=_TACO_BYTES,
        input_bytes_source=f"int64 text ({LJ_PADDED_CHARS} ids) + float32 mel target 80x{LJ_PADDED_FRAMES} + float32 gate "
        f"target ({LJ_PADDED_FRAMES}) + 2 int64 lengths, padded: {_TACO_BYTES} B",
        default_batch_size_per_gpu=88,
        sequence_length=LJ_PADDED_FRAMES,
        sample_unit="utterances",
        tokens_per_sample=LJ_FRAMES,
        extra_sources={
            "sequence_length": ("estimated", LJ_PADDED_SOURCE),
            "tokens_per_sample": configured(
                f"real mel frames per utterance ({LJ_SOURCE}); the example's train_items_per_sec counts the batch's "
                "output lengths, padding excluded"
            ),
            "default_batch_size_per_gpu": configured(f"{LAMBDA_24GB}: --batch-size 88"),
        },
        notes="Counted on the padded batch a training step computes; per-frame throughput counts the real frames. A "
        "batch of a few utterances pads less.",
    ),
    Recipe(
        name="waveglow",
        aliases=("wave-glow", "waveglow-512"),
        domain="speech",
        description="WaveGlow mel-to-audio flow (12 flows, WN of 8 layers x 512 channels), LJSpeech, "
        f"{WAVEGLOW_SEGMENT}-sample segments",
        architecture=f"{DLE_TTS} waveglow/model.py (Prenger et al. 2019, arXiv:1811.00002), plain torch definition "
        "features.model_defs.speech.WaveGlow (weight normalisation omitted)",
        build=_waveglow_probe,
        input_bytes_per_sample=_WG_BYTES,
        input_bytes_source=f"float32 audio segment ({WAVEGLOW_SEGMENT}) + float32 mel 80x32: {_WG_BYTES} B",
        default_batch_size_per_gpu=8,
        sequence_length=WAVEGLOW_SEGMENT,
        sample_unit="segments",
        tokens_per_sample=WAVEGLOW_SEGMENT,
        extra_sources={
            "sequence_length": configured(f"{LAMBDA_24GB}: --segment-length 8000"),
            "tokens_per_sample": configured(
                "audio samples per segment (--segment-length 8000); the example's train_items_per_sec counts "
                "audio samples"
            ),
            "default_batch_size_per_gpu": configured(f"{LAMBDA_24GB}: --batch-size 8 in FP32"),
        },
        notes="The WaveGlow paper's released model uses 256 WN channels (about 88 M parameters); the example "
        "trains with its --wn-channels default of 512.",
    ),
    Recipe(
        name="rnnt",
        aliases=("rnn-t", "rnn_t", "rnnt-librispeech"),
        domain="speech",
        description="RNN-T speech recognition (MLPerf), LibriSpeech, 12.3 s utterances (205 encoder frames, 43 "
        "sentencepiece tokens)",
        architecture="MLPerf Training RNN-T (mlcommons/training rnn_speech_recognition/pytorch, "
        "configs/baseline_v3-1023sp.yaml; Graves 2012, arXiv:1211.3711), plain torch definition "
        "features.model_defs.speech.RNNT",
        build=_rnnt_probe,
        device="cpu",
        input_bytes_per_sample=_RNNT_BYTES,
        input_bytes_source=f"float32 16 kHz waveform of {RNNT_SECONDS} s + {RNNT_TOKENS} int64 tokens: "
        f"{_RNNT_BYTES} B (features are computed on the GPU)",
        default_batch_size_per_gpu=192,
        sequence_length=RNNT_FRAMES,
        sample_unit="utterances",
        extra_sources={
            "sequence_length": configured(
                "LibriSpeech train-960 mean utterance 12.3 s (960.9 h / 281,241 utterances): 1230 frames of 10 ms, "
                "stacked by 3 to 410 encoder inputs; 43 tokens assumed (about 33 words at 1.3 sentencepieces each)"
            ),
            "default_batch_size_per_gpu": configured(
                "MLPerf Training v3.1 results (mlcommons/training_results_v3.1): 1536 / 8 = 192 per GPU"
            ),
        },
        notes="The transducer loss is replaced by a read of the lattice's log-probabilities of the same size.",
    ),
]
