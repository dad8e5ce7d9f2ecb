"""Object detection workloads: SSD (VGG-16 and ResNet-50 backbones), Faster/Mask R-CNN, RetinaNet.

Faster R-CNN, Mask R-CNN, RetinaNet and SSD300-VGG16 are torchvision's
definitions (random weights, nothing downloaded). SSD300 with a ResNet-50
backbone (NVIDIA DeepLearningExamples' SSD300 v1.1) is written here. The
detectors run on real CPU tensors: proposals and matched boxes depend on
the data. Each image carries 7 ground-truth objects (COCO averages 7.3 per
image); the batch of 2 repeats the same image, so the work doubles exactly.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torchvision.models.detection import (
    fasterrcnn_resnet50_fpn,
    maskrcnn_resnet50_fpn,
    ssd300_vgg16,
)
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.retinanet import RetinaNet, RetinaNetClassificationHead
from torchvision.ops.feature_pyramid_network import LastLevelP6P7

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, UINT8_BYTES, Probe, Recipe, configured, seeded

TV = "torchvision 0.29.1"
OBJECTS_PER_IMAGE = 7


def _targets(height: int, width: int, num_classes: int, generator: torch.Generator, masks: bool) -> dict:
    """``OBJECTS_PER_IMAGE`` random boxes (at least 1/8 of the side), labels and, optionally, box masks."""
    n = OBJECTS_PER_IMAGE
    x0 = torch.rand(n, generator=generator) * width * 0.6
    y0 = torch.rand(n, generator=generator) * height * 0.6
    w = (0.125 + 0.275 * torch.rand(n, generator=generator)) * width
    h = (0.125 + 0.275 * torch.rand(n, generator=generator)) * height
    boxes = torch.stack([x0, y0, x0 + w, y0 + h], dim=1)
    target = {"boxes": boxes, "labels": torch.randint(1, num_classes, (n,), generator=generator)}
    if masks:
        m = torch.zeros(n, height, width, dtype=torch.uint8)
        for i, (a, b, c, d) in enumerate(boxes.round().long().tolist()):
            m[i, b:d, a:c] = 1
        target["masks"] = m
    return target


def _detector_probe(model: nn.Module, height: int, width: int, num_classes: int, masks: bool = False) -> Probe:
    """A torchvision detector in training mode: ``model(images, targets)`` returns its loss dict."""
    g = seeded()
    image = torch.rand(3, height, width, generator=g)
    target = _targets(height, width, num_classes, g, masks)

    def make_batch(b: int):
        return [image] * b, [target] * b

    def loss(m: nn.Module, batch):
        imgs, tgts = batch
        return sum(m(imgs, tgts).values())

    return Probe(model, make_batch, loss)


def _detection_input_bytes(height: int, width: int) -> float:
    """Decoded uint8 image plus boxes (float32) and labels (int64) of the objects."""
    return 3 * height * width * UINT8_BYTES + OBJECTS_PER_IMAGE * (4 * FLOAT32_BYTES + INT64_BYTES)


def _detection_input_source(height: int, width: int) -> str:
    return (
        f"decoded image 3x{height}x{width} uint8 + {OBJECTS_PER_IMAGE} boxes (4 float32) and labels (int64); "
        "COCO averages 7.3 objects per image"
    )


class SSD300ResNet50(nn.Module):
    """SSD300 v1.1 (NVIDIA DeepLearningExamples PyTorch/Detection/SSD, src/model.py).

    ResNet-50 truncated after ``layer3`` with its first block's stride set
    to 1 (1024 x 38 x 38 features from a 300 x 300 image); five extra blocks
    (1x1 conv to 256/256/128/128/128 channels, then a 3x3 conv, stride 2 for
    the first three) give 512 x 19^2, 512 x 10^2, 256 x 5^2, 256 x 3^2 and
    256 x 1^2 maps; 4, 6, 6, 6, 4, 4 default boxes per location (8732 in
    all); 3x3 localisation and confidence heads over 81 COCO classes.
    Smooth-L1 box loss plus cross-entropy over all default boxes.
    """

    num_classes = 81
    out_channels = (1024, 512, 512, 256, 256, 256)
    num_defaults = (4, 6, 6, 6, 4, 4)

    def __init__(self) -> None:
        super().__init__()
        backbone = torchvision.models.resnet50(weights=None)
        layer3 = backbone.layer3
        layer3[0].conv1.stride = (1, 1)
        layer3[0].conv2.stride = (1, 1)
        layer3[0].downsample[0].stride = (1, 1)
        self.feature_extractor = nn.Sequential(
            backbone.conv1, backbone.bn1, backbone.relu, backbone.maxpool, backbone.layer1, backbone.layer2, layer3
        )
        blocks = []
        mids = (256, 256, 128, 128, 128)
        for i, (cin, cout, mid) in enumerate(zip(self.out_channels[:-1], self.out_channels[1:], mids)):
            stride, pad = (2, 1) if i < 3 else (1, 0)
            blocks.append(
                nn.Sequential(
                    nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                    nn.Conv2d(mid, cout, 3, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                )  # fmt: skip
            )
        self.additional_blocks = nn.ModuleList(blocks)
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for c, n in zip(self.out_channels, self.num_defaults))
        self.conf = nn.ModuleList(
            nn.Conv2d(c, n * self.num_classes, 3, padding=1) for c, n in zip(self.out_channels, self.num_defaults)
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.feature_extractor(images)
        features = [x]
        for block in self.additional_blocks:
            x = block(x)
            features.append(x)
        b = images.shape[0]
        locs = torch.cat([loc(f).reshape(b, 4, -1) for loc, f in zip(self.loc, features)], 2)
        confs = torch.cat([conf(f).reshape(b, self.num_classes, -1) for conf, f in zip(self.conf, features)], 2)
        return locs, confs


def _ssd_resnet50_probe() -> Probe:
    model = SSD300ResNet50()
    default_boxes = 8732

    def make_batch(b: int):
        images = torch.randn(b, 3, 300, 300)
        box_targets = torch.randn(b, 4, default_boxes)
        labels = torch.randint(0, SSD300ResNet50.num_classes, (b, default_boxes))
        return images, box_targets, labels

    def loss(m: nn.Module, batch):
        images, box_targets, labels = batch
        locs, confs = m(images)
        return F.smooth_l1_loss(locs, box_targets) + F.cross_entropy(confs, labels)

    return Probe(model, make_batch, loss)


RETINANET_CLASSES = 264


def _retinanet_resnext50() -> nn.Module:
    """MLPerf RetinaNet: ResNeXt-50 32x4d FPN (P3-P7), 264 OpenImages classes, images resized to 800x800."""
    backbone = torchvision.models.resnext50_32x4d(weights=None)
    backbone = _resnet_fpn_extractor(backbone, 3, returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(2048, 256))
    return RetinaNet(backbone, num_classes=RETINANET_CLASSES, min_size=800, max_size=800, fixed_size=(800, 800))


class _FusedFocalLoss(torch.autograd.Function):
    """The traffic of apex's fused focal loss (``apex.contrib.focal_loss.FocalLoss``).

    Its forward kernel reads the logits and each anchor's class index and
    writes the loss and the partial gradient; its backward kernel scales that
    gradient in place. Here the forward is one element-wise operator (logits
    in, partial gradient out) and the backward one in-place multiply, so the
    operator counter sees the same bytes and two kernels, where torchvision's
    unfused loss runs about twenty operators over the logits and a dense
    one-hot target of the same size.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        partial = torch.sigmoid(logits)
        ctx.save_for_backward(partial)
        return logits.new_zeros(())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (partial,) = ctx.saved_tensors
        return partial.mul_(grad), None


class _FusedFocalLossHead(RetinaNetClassificationHead):
    """RetinaNet's classification head with the fused focal loss over each anchor's class index."""

    def compute_loss(self, targets, head_outputs, matched_idxs):
        losses = []
        for target, logits, matched in zip(targets, head_outputs["cls_logits"], matched_idxs):
            # Class index per anchor; background and ignored anchors keep the matcher's negative codes.
            classes = torch.where(matched >= 0, target["labels"][matched.clamp(min=0)], matched)
            losses.append(_FusedFocalLoss.apply(logits, classes) / max(1, int((matched >= 0).sum())))
        return sum(losses) / len(targets)


def _retinanet_fused_loss() -> nn.Module:
    """MLPerf RetinaNet as NVIDIA's implementation trains it: the fused focal loss (``--apex-focal-loss``)."""
    model = _retinanet_resnext50()
    head = model.head.classification_head
    model.head.classification_head = _FusedFocalLossHead(
        model.backbone.out_channels, head.num_anchors, RETINANET_CLASSES
    )
    return model


MLPERF_V31 = "MLPerf Training v3.1 results (mlcommons/training_results_v3.1), median global batch / accelerators"
RETINANET_ARCHITECTURE = (
    f"{TV} RetinaNet with a resnext50_32x4d FPN backbone, as the MLPerf Training reference "
    "(mlcommons/training single_stage_detector; Lin et al. 2017, arXiv:1708.02002)"
)
#: How both RetinaNet layouts are counted and run: 800 x 800 images, 32 per GPU as MLPerf v3.1.
_RETINANET_RUN = dict(
    device="cpu",
    batch_sizes=(1, 2),
    input_bytes_per_sample=_detection_input_bytes(800, 800),
    input_bytes_source=_detection_input_source(800, 800),
    default_batch_size_per_gpu=32,
    input_shape=(3, 800, 800),
    sample_unit="images",
    extra_sources={"default_batch_size_per_gpu": configured(f"{MLPERF_V31}: 256 / 8 = 32 per GPU")},
)

RECIPES = [
    Recipe(
        name="ssd300-vgg16",
        aliases=("ssd-vgg16", "ssd300_vgg16", "ssd-300-vgg16"),
        domain="vision",
        description="SSD300 with a VGG-16 backbone, Pascal VOC (21 classes), 300x300",
        architecture=f"{TV} ssd300_vgg16(num_classes=21) (Liu et al. 2016, arXiv:1512.02325)",
        build=lambda: _detector_probe(ssd300_vgg16(weights=None, weights_backbone=None, num_classes=21), 300, 300, 21),
        device="cpu",
        batch_sizes=(1, 2),
        input_bytes_per_sample=_detection_input_bytes(300, 300),
        input_bytes_source=_detection_input_source(300, 300),
        default_batch_size_per_gpu=32,
        ai_matrix=True,
        input_shape=(3, 300, 300),
        sample_unit="images",
        extra_sources={"default_batch_size_per_gpu": configured("AI Matrix macro_benchmark/SSD README trains batch 32")},
        notes="AI Matrix's SSD (TensorFlow SSD-Tensorflow port) trains SSD-300 VGG on Pascal VOC.",
    ),
    Recipe(
        name="ssd300-resnet50",
        aliases=("ssd-resnet50", "ssd300-v1.1", "ssd300_resnet50"),
        domain="vision",
        description="SSD300 v1.1 with a ResNet-50 backbone (NVIDIA DeepLearningExamples), COCO, 300x300",
        architecture="NVIDIA DeepLearningExamples PyTorch/Detection/SSD (SSD300 v1.1), plain torch definition "
        f"features.model_defs.detection.SSD300ResNet50 on {TV} resnet50",
        build=_ssd_resnet50_probe,
        input_bytes_per_sample=_detection_input_bytes(300, 300),
        input_bytes_source=_detection_input_source(300, 300),
        default_batch_size_per_gpu=32,
        input_shape=(3, 300, 300),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured("NVIDIA DeepLearningExamples SSD default --batch-size 32 per GPU")
        },
        notes="Box matching and hard-negative mining replaced by a dense loss over the 8732 default boxes "
        "(their cost is negligible next to the network).",
    ),
    Recipe(
        name="faster-rcnn",
        aliases=("faster_rcnn", "fasterrcnn", "faster-rcnn-resnet50-fpn"),
        domain="vision",
        description="Faster R-CNN, ResNet-50 FPN, COCO, images resized to 800x1067",
        architecture=f"{TV} fasterrcnn_resnet50_fpn (Ren et al. 2015; Lin et al. 2017 FPN)",
        build=lambda: _detector_probe(
            fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91, trainable_backbone_layers=3),
            800, 1067, 91,
        ),  # fmt: skip
        device="cpu",
        batch_sizes=(1, 2),
        input_bytes_per_sample=_detection_input_bytes(800, 1067),
        input_bytes_source=_detection_input_source(800, 1067),
        default_batch_size_per_gpu=2,
        ai_matrix=True,
        input_shape=(3, 800, 1067),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured("torchvision detection reference: 2 images per GPU"),
            "input_shape": configured("a 640x480 COCO image resized to an 800-pixel short side"),
        },
    ),
    Recipe(
        name="mask-rcnn",
        aliases=("mask_rcnn", "maskrcnn", "mask-rcnn-resnet50-fpn"),
        domain="vision",
        description="Mask R-CNN, ResNet-50 FPN, COCO, images resized to 800x1067",
        architecture=f"{TV} maskrcnn_resnet50_fpn (He et al. 2017, arXiv:1703.06870)",
        build=lambda: _detector_probe(
            maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91, trainable_backbone_layers=3),
            800, 1067, 91, masks=True,
        ),  # fmt: skip
        device="cpu",
        batch_sizes=(1, 2),
        input_bytes_per_sample=_detection_input_bytes(800, 1067),
        input_bytes_source=_detection_input_source(800, 1067) + " (mask polygons are negligible)",
        default_batch_size_per_gpu=12,
        ai_matrix=True,
        input_shape=(3, 800, 1067),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured(f"{MLPERF_V31}: 96 / 8 = 12 per GPU"),
            "input_shape": configured("a 640x480 COCO image resized to an 800-pixel short side"),
        },
        notes="The mask head runs on the positive RoIs of random weights (ground-truth boxes are always "
        "among the proposals): a trained network has more positives, so mask-head FLOPs are a lower bound.",
    ),
    Recipe(
        name="retinanet",
        aliases=("retinanet-resnext50", "retinanet_resnext50_32x4d_fpn"),
        domain="vision",
        description="RetinaNet, ResNeXt-50 32x4d FPN, OpenImages (264 classes), 800x800 (MLPerf single-stage detector)",
        architecture=RETINANET_ARCHITECTURE,
        build=lambda: _detector_probe(_retinanet_resnext50(), 800, 800, RETINANET_CLASSES),
        **_RETINANET_RUN,
    ),
    Recipe(
        name="retinanet-fused-loss",
        aliases=("mlperf-retinanet", "retinanet-apex-focal-loss"),
        domain="vision",
        description="RetinaNet, ResNeXt-50 32x4d FPN, OpenImages (264 classes), 800x800, with the fused focal loss "
        "(apex's one-kernel sigmoid focal loss, as NVIDIA's MLPerf implementation trains it)",
        architecture=f"{RETINANET_ARCHITECTURE}, classification loss as "
        "apex.contrib.focal_loss (one forward kernel: logits and class indices in, loss and partial gradient out; "
        "the backward scales the gradient in place)",
        build=lambda: _detector_probe(_retinanet_fused_loss(), 800, 800, RETINANET_CLASSES),
        **_RETINANET_RUN,
        network_of="retinanet",
        notes="Every MLPerf RetinaNet configuration of NVIDIA's implementation (v2.0 to v3.1, NVIDIA/benchmarks/ssd "
        "config_*.sh, EXTRA_PARAMS) passes --apex-focal-loss, as AMD's MI250 configurations do: with "
        "torchvision's unfused loss over 120,087 anchors x 264 classes, a sample's memory-bound bytes are 20.0 GB "
        "against 8.9 GB fused (counted).",
    ),
]
