"""Image classification, text recognition and volumetric segmentation workloads.

The ImageNet classifiers are torchvision's definitions (``weights=None``:
random weights, nothing downloaded). CRNN and the MLPerf 3D U-Net are written
here after their published architectures, which no installed library has.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import (
    FLOAT32_BYTES,
    INT64_BYTES,
    UINT8_BYTES,
    Probe,
    Recipe,
    configured,
    randint,
    randn,
    repeat_to,
    seeded,
)

TV = "torchvision 0.29.1"


def _classifier_probe(model: nn.Module, image_size: int, aux_weight: float | None = None) -> Probe:
    """Cross-entropy training on ``3 x image_size x image_size`` images, 1000 classes."""
    g = seeded()
    images = randn(2, 3, image_size, image_size, generator=g)
    labels = randint(0, 1000, (2,), generator=g)

    def make_batch(b: int):
        return repeat_to(images, b), repeat_to(labels, b)

    def loss(m: nn.Module, batch):
        x, y = batch
        out = m(x)
        if aux_weight is None:
            return F.cross_entropy(out, y)
        return F.cross_entropy(out.logits, y) + aux_weight * F.cross_entropy(out.aux_logits, y)

    return Probe(model, make_batch, loss)


def _image_bytes(size: int) -> int:
    return 3 * size * size * UINT8_BYTES + INT64_BYTES


def _image_source(size: int) -> str:
    return f"decoded image 3x{size}x{size} uint8 ({3 * size * size} B) + int64 label (8 B)"


class CRNN(nn.Module):
    """CRNN for scene-text recognition (Shi, Bai, Yao 2015, arXiv:1507.05717, Table 1).

    Input (B, 1, 32, 100) grey-scale word images. Seven 3x3 convolutions
    (64, 128, 256, 256, 512, 512 channels, then a 2x2 512-channel one) with
    2x2 max-pools after the first two, 1x2 (stride 2x1) pools after the
    fourth and sixth, batch norm after the fifth and sixth, give a 1 x 26
    map of 512 features: 26 time steps. Two bidirectional LSTM layers of 256
    units each, with a linear map after each, emit per-step logits over 37
    classes (26 letters, 10 digits, the CTC blank); CTC loss.
    """

    num_classes = 37

    def __init__(self) -> None:
        super().__init__()

        def conv(cin: int, cout: int, k: int = 3, p: int = 1, bn: bool = False) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, 1, p)]
            if bn:
                layers.append(nn.BatchNorm2d(cout))
            return [*layers, nn.ReLU(inplace=True)]

        self.cnn = nn.Sequential(
            *conv(1, 64), nn.MaxPool2d(2, 2),
            *conv(64, 128), nn.MaxPool2d(2, 2),
            *conv(128, 256), *conv(256, 256), nn.MaxPool2d((2, 2), (2, 1), (0, 1)),
            *conv(256, 512, bn=True), *conv(512, 512, bn=True), nn.MaxPool2d((2, 2), (2, 1), (0, 1)),
            *conv(512, 512, k=2, p=0, bn=True),
        )  # fmt: skip
        self.rnn1 = nn.LSTM(512, 256, bidirectional=True)
        self.embed1 = nn.Linear(512, 256)
        self.rnn2 = nn.LSTM(256, 256, bidirectional=True)
        self.embed2 = nn.Linear(512, self.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.cnn(images).squeeze(2).permute(2, 0, 1)  # (T, B, 512)
        x = self.embed1(self.rnn1(features)[0])
        return self.embed2(self.rnn2(x)[0])  # (T, B, classes)


def _crnn_probe() -> Probe:
    g = seeded()
    images = randn(2, 1, 32, 100, generator=g)
    label_length = 10
    targets = randint(1, CRNN.num_classes, (2, label_length), generator=g)

    def make_batch(b: int):
        return repeat_to(images, b), repeat_to(targets, b)

    def loss(m: nn.Module, batch):
        x, y = batch
        log_probs = m(x).log_softmax(2)
        steps, b = log_probs.shape[:2]
        return F.ctc_loss(
            log_probs, y, torch.full((b,), steps, dtype=torch.long), torch.full((b,), label_length, dtype=torch.long)
        )

    return Probe(CRNN(), make_batch, loss)


class _ConvNormAct3d(nn.Sequential):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__(
            nn.Conv3d(cin, cout, 3, stride, 1, bias=False),
            nn.InstanceNorm3d(cout, affine=True),
            nn.ReLU(inplace=True),
        )


class UNet3D(nn.Module):
    """The MLPerf Training 3D U-Net (KiTS19), after mlcommons/training image_segmentation/pytorch/model/unet3d.py.

    Input (B, 1, 128, 128, 128) CT patch. Filters 32, 64, 128, 256, 320:
    an input block of two 3x3x3 conv + instance norm + ReLU, four downsampling
    blocks (strided conv then conv) to 320 channels, a bottleneck downsample
    (320 -> 320, 4^3 voxels), five upsampling blocks (2x2x2 transposed conv,
    concatenation with the skip, two convs) back to 32 channels at 128^3, and
    a 1x1x1 conv to 3 classes. Dice + cross-entropy loss.
    """

    filters = (32, 64, 128, 256, 320)
    num_classes = 3

    def __init__(self) -> None:
        super().__init__()
        f = self.filters
        self.input_block = nn.Sequential(_ConvNormAct3d(1, f[0]), _ConvNormAct3d(f[0], f[0]))
        self.downsample = nn.ModuleList(
            nn.Sequential(_ConvNormAct3d(i, o, 2), _ConvNormAct3d(o, o)) for i, o in zip(f[:-1], f[1:])
        )
        self.bottleneck = nn.Sequential(_ConvNormAct3d(f[-1], f[-1], 2), _ConvNormAct3d(f[-1], f[-1]))
        pairs = [(f[-1], f[-1])] + list(zip(reversed(f[1:]), reversed(f[:-1])))
        self.up_convs = nn.ModuleList(nn.ConvTranspose3d(i, o, 2, 2) for i, o in pairs)
        self.up_blocks = nn.ModuleList(
            nn.Sequential(_ConvNormAct3d(2 * o, o), _ConvNormAct3d(o, o)) for _, o in pairs
        )
        self.output = nn.Conv3d(f[0], self.num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_block(x)
        skips = [x]
        for block in self.downsample:
            x = block(x)
            skips.append(x)
        x = self.bottleneck(x)
        for up, block, skip in zip(self.up_convs, self.up_blocks, reversed(skips)):
            x = block(torch.cat([up(x), skip], dim=1))
        return self.output(x)


def _unet3d_probe() -> Probe:
    side = 128

    def make_batch(b: int):
        images = torch.randn(b, 1, side, side, side)
        labels = torch.randint(0, UNet3D.num_classes, (b, side, side, side))
        return images, labels

    def loss(m: nn.Module, batch):
        x, y = batch
        logits = m(x)
        probs = logits.softmax(1)
        onehot = F.one_hot(y, UNet3D.num_classes).permute(0, 4, 1, 2, 3).to(probs.dtype)
        dims = (0, 2, 3, 4)
        dice = (2 * (probs * onehot).sum(dims) + 1e-6) / (probs.sum(dims) + onehot.sum(dims) + 1e-6)
        return F.cross_entropy(logits, y) + (1 - dice).mean()

    return Probe(UNet3D(), make_batch, loss)


class SEBottleneck(torchvision.models.resnet.Bottleneck):
    """A ResNeXt bottleneck with squeeze-and-excitation (Hu et al. 2018, arXiv:1709.01507).

    Before the residual sum, the block's output channels are rescaled by a gate
    computed from their global average: a 1x1 convolution down to a sixteenth of
    the channels, ReLU, a 1x1 convolution back up, sigmoid. As NVIDIA
    DeepLearningExamples' ConvNets ``se-resnext101-32x4d`` builds it
    (``SqueezeAndExcitation`` with squeeze ``planes * 4 // 16``).
    """

    def __init__(self, inplanes: int, planes: int, *args, **kwargs) -> None:
        super().__init__(inplanes, planes, *args, **kwargs)
        channels = planes * self.expansion
        self.squeeze = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(channels, channels // 16, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels // 16, channels, 1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out * self.squeeze(out) + identity)


def resnext101_32x4d(block: type = torchvision.models.resnet.Bottleneck) -> nn.Module:
    """ResNeXt-101 32x4d (Xie et al. 2017, arXiv:1611.05431): ResNet-101's stages with 32 groups of 4 channels
    in the first stage's 3x3 convolutions (widths doubling per stage), stride in the 3x3 convolution (v1.5)."""
    return torchvision.models.resnet.ResNet(block, [3, 4, 23, 3], groups=32, width_per_group=4)


DLE_CONVNETS = "NVIDIA DeepLearningExamples TensorFlow ConvNets"


def _resnext_recipe(name: str, aliases: tuple[str, ...], description: str, architecture: str, block: type, batch: int) -> Recipe:
    """A ResNeXt-101 32x4d classifier recipe with ``block`` as its bottleneck, at DeepLearningExamples' mixed-precision batch."""
    return Recipe(
        name=name,
        aliases=aliases,
        domain="vision",
        description=description,
        architecture=architecture,
        build=lambda: _classifier_probe(resnext101_32x4d(block), 224),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=batch,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured(f"{DLE_CONVNETS} {name}, {batch} per GPU at mixed precision")},
    )

AI_MATRIX_CNN = "AI Matrix macro_benchmark/CNN_Tensorflow/train-all.sh runs batch 16, 32 and 64 per GPU"

RECIPES = [
    Recipe(
        name="googlenet",
        aliases=("inception-v1", "googlenet-v1"),
        domain="vision",
        description="GoogLeNet (Inception v1), ImageNet, 3x224x224, no auxiliary heads",
        architecture=f"{TV} googlenet(aux_logits=False) (Szegedy et al. 2015, arXiv:1409.4842)",
        build=lambda: _classifier_probe(
            torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False), 224
        ),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured(AI_MATRIX_CNN)},
        notes=(
            "torchvision's GoogLeNet adds batch norm and uses a 3x3 kernel in the '5x5' branch; AI Matrix's "
            "nvcnn.py googlenet has no batch norm and no auxiliary heads."
        ),
    ),
    Recipe(
        name="resnet50",
        aliases=("resnet-50", "resnet50-v1.5", "rn50"),
        domain="vision",
        description="ResNet-50 v1.5, ImageNet, 3x224x224",
        architecture=f"{TV} resnet50 (He et al. 2016; v1.5: stride 2 in the 3x3 conv)",
        build=lambda: _classifier_probe(torchvision.models.resnet50(weights=None), 224),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=256,
        ai_matrix=True,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured(
                "NVIDIA DeepLearningExamples PyTorch ConvNets resnet50 default batch 256 per GPU"
            )
        },
    ),
    Recipe(
        name="resnet152",
        aliases=("resnet-152",),
        domain="vision",
        description="ResNet-152 v1.5, ImageNet, 3x224x224",
        architecture=f"{TV} resnet152 (He et al. 2016)",
        build=lambda: _classifier_probe(torchvision.models.resnet152(weights=None), 224),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured(AI_MATRIX_CNN)},
    ),
    _resnext_recipe(
        "resnext101-32x4d",
        ("resnext101", "resnext-101-32x4d"),
        "ResNeXt-101 32x4d, ImageNet, 3x224x224",
        f"{TV} ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4) (Xie et al. 2017, arXiv:1611.05431)",
        torchvision.models.resnet.Bottleneck,
        128,
    ),
    _resnext_recipe(
        "se-resnext101-32x4d",
        ("se-resnext101", "se-resnext-101-32x4d"),
        "SE-ResNeXt-101 32x4d (squeeze-and-excitation, reduction 16), ImageNet, 3x224x224",
        f"{TV} ResNet with features.model_defs.vision.SEBottleneck, [3, 4, 23, 3], groups=32, "
        "width_per_group=4 (Hu et al. 2018, arXiv:1709.01507)",
        SEBottleneck,
        96,
    ),
    Recipe(
        name="densenet121",
        aliases=("densenet-121",),
        domain="vision",
        description="DenseNet-121, ImageNet, 3x224x224",
        architecture=f"{TV} densenet121 (Huang et al. 2017, arXiv:1608.06993)",
        build=lambda: _classifier_probe(torchvision.models.densenet121(weights=None), 224),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured(AI_MATRIX_CNN)},
    ),
    Recipe(
        name="vgg16",
        aliases=("vgg-16",),
        domain="vision",
        description="VGG-16 (configuration D), ImageNet, 3x224x224",
        architecture=f"{TV} vgg16 (Simonyan and Zisserman 2015, arXiv:1409.1556)",
        build=lambda: _classifier_probe(torchvision.models.vgg16(weights=None), 224),
        input_bytes_per_sample=_image_bytes(224),
        input_bytes_source=_image_source(224),
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        input_shape=(3, 224, 224),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured(AI_MATRIX_CNN)},
    ),
    Recipe(
        name="inception-v3",
        aliases=("inception_v3", "inceptionv3", "inception3"),
        domain="vision",
        description="Inception v3, ImageNet, 3x299x299, auxiliary classifier weighted 0.4",
        architecture=f"{TV} inception_v3(aux_logits=True) (Szegedy et al. 2016, arXiv:1512.00567)",
        build=lambda: _classifier_probe(
            torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False), 299, aux_weight=0.4
        ),
        input_bytes_per_sample=_image_bytes(299),
        input_bytes_source=_image_source(299),
        default_batch_size_per_gpu=64,
        input_shape=(3, 299, 299),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured("tf_cnn_benchmarks-style 64 per GPU")},
    ),
    Recipe(
        name="crnn",
        aliases=("crnn-ocr",),
        domain="vision",
        description="CRNN text recognition, 1x32x100 grey word images, 26 time steps, CTC over 37 classes",
        architecture="CRNN (Shi, Bai, Yao 2015, arXiv:1507.05717, Table 1), plain torch definition "
        "features.model_defs.vision.CRNN",
        build=_crnn_probe,
        device="cpu",  # no meta kernel for the CTC loss
        input_bytes_per_sample=32 * 100 * UINT8_BYTES + 10 * INT64_BYTES,
        input_bytes_source="grey image 1x32x100 uint8 (3200 B) + 10 int64 label ids (80 B)",
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        input_shape=(1, 32, 100),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured("64 per GPU (the CRNN paper trains with batch 64)"),
        },
        notes="Labels of 10 characters assumed for the CTC loss (its cost is negligible).",
    ),
    Recipe(
        name="unet3d",
        aliases=("unet-3d", "3d-unet", "unet3d-kits19"),
        domain="vision",
        description="MLPerf 3D U-Net, KiTS19, 1x128x128x128 patches, 3 classes",
        architecture="MLPerf Training 3D U-Net (mlcommons/training image_segmentation/pytorch/model/unet3d.py), "
        "plain torch definition features.model_defs.vision.UNet3D",
        build=_unet3d_probe,
        device="meta",
        input_bytes_per_sample=128**3 * (FLOAT32_BYTES + UINT8_BYTES),
        input_bytes_source="float32 image patch 1x128^3 (8,388,608 B) + uint8 label patch 128^3 (2,097,152 B)",
        default_batch_size_per_gpu=2,
        input_shape=(1, 128, 128, 128),
        sample_unit="patches",
        extra_sources={
            "default_batch_size_per_gpu": configured("MLPerf reference batch 2 per GPU"),
        },
        notes="One sample is one 128^3 training patch (MLPerf counts samples this way).",
    ),
]
