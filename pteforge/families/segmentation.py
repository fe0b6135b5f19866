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

    def _mask(self, row, protos, size: int):
        cx, cy, w, h = row[:4].tolist()
        return proto_mask(row[4 + self.nc:], protos[0], (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), size)

    def result(self, det: Detection, outputs, meta, names) -> dict:
        import numpy as np
        import torch

        size = outputs[1].shape[-1] * 4  # the prototypes are at stride 4 of the input
        mask = self._mask(_rows(outputs[0])[det.anchor], outputs[1], size).float()[None, None]
        full = torch.nn.functional.interpolate(mask, size=(size, size), mode="nearest")[0, 0]
        top, left = round(meta.pad[1]), round(meta.pad[0])
        h, w = meta.shape
        inner = full[top:size - top or None, left:size - left or None][None, None]
        photo = torch.nn.functional.interpolate(inner, size=(h, w), mode="nearest")[0, 0] > 0.5
        d = det.to_dict(names)
        d["mask_area"] = int(photo.sum())
        d["_mask"] = np.asarray(photo)
        return d

    def match(self, det, reference, outputs, meta) -> float:
        """Mask IoU between eager's mask and the program's at the same anchor (0 when the
        program's box or class there is not eager's)."""
        row = _rows(outputs[0])[det.anchor]
        if not _same_box(det, row, meta, self.nc):
            return 0.0
        size = reference[1].shape[-1] * 4
        return mask_iou(self._mask(_rows(reference[0])[det.anchor], reference[1], size), self._mask(row, outputs[1], size))

    def manifest_extra(self, spec):
        return {"classes": self.nc, "mask_prototypes": 32}
