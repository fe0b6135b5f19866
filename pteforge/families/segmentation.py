"""Instance segmentation: Ultralytics YOLO seg models (category ``yolo-seg``): boxes, COCO
classes and a mask per detection from 32 prototypes; agreement with eager is mask IoU."""

from __future__ import annotations

from .detection import Detection, YoloFamily, _rows, _same_box


def proto_mask(coefficients, protos, box_in_input, size: int):
    """A detection's mask at prototype resolution: sigmoid(coefficients · prototypes) > 0.5,
    cropped to its box (input pixels scaled to the prototypes), as Ultralytics does."""
    import torch

    c, mh, mw = protos.shape[-3:]
    mask = (coefficients.float() @ protos.reshape(c, -1).float()).reshape(mh, mw) > 0.0
    x1, y1, x2, y2 = (v * mw / size for v in box_in_input)
    cols = torch.arange(mw).float()[None, :]
    rows = torch.arange(mh).float()[:, None]
    return mask & (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2)


def mask_iou(a, b) -> float:
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


class Segmentation(YoloFamily):
    word = "yolo-seg"
    category = "yolo-seg"
    task = "segmentation"
    models = ("yolo11n-seg",)
    model_help = "YOLO instance segmentation, e.g. yolo11n-seg (alone: yolo11n-seg)"
    model_class = "SegmentationModel"
    outputs = "(1, 116, 8400): cx, cy, w, h + 80 class scores + 32 mask coefficients; (1, 32, 160, 160) prototypes"
    min_agreement = 0.9  # mean mask IoU against eager
    order = 40

    def extra_of(self, outputs: list) -> int:
        return outputs[1].shape[-3]  # a mask coefficient per prototype

    def _mask(self, row, protos, size: int):
        cx, cy, w, h = row[:4].tolist()
        return proto_mask(row[-protos.shape[-3]:], protos[0], (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), size)

    def result(self, det: Detection, outputs, meta, names) -> dict:
        """As Ultralytics' predictor with retina masks: the mask logits at prototype
        resolution, the letterbox padding removed, resized to the photo (bilinear), cropped
        to the box, > 0."""
        import numpy as np
        import torch

        protos = outputs[1][0].float()
        c, mh, mw = protos.shape
        logits = (_rows(outputs[0])[det.anchor][-c:] @ protos.reshape(c, -1)).reshape(1, 1, mh, mw)
        stride = outputs[1].shape[-1] * 4 / mw  # input pixels per prototype pixel (4)
        left, top = meta.pad[0] / stride, meta.pad[1] / stride
        h, w = meta.shape
        t, b = round(top - 0.1), round(mh - top + 0.1)
        l, r = round(left - 0.1), round(mw - left + 0.1)
        photo = torch.nn.functional.interpolate(logits[..., t:b, l:r], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        x1, y1, x2, y2 = det.box
        cols, rows = torch.arange(w).float()[None, :], torch.arange(h).float()[:, None]
        mask = (photo > 0.0) & (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2)
        d = det.to_dict(names)
        d["mask_area"] = int(mask.sum())
        d["_mask"] = np.asarray(mask)
        return d

    def match(self, det, reference, outputs, meta) -> float:
        """Mask IoU between eager's mask and the program's at the same anchor (0 when the
        program's box or class there is not eager's)."""
        row = _rows(outputs[0])[det.anchor]
        if not _same_box(det, row, meta, self.classes(outputs)):
            return 0.0
        size = reference[1].shape[-1] * 4
        return mask_iou(self._mask(_rows(reference[0])[det.anchor], reference[1], size), self._mask(row, outputs[1], size))
