"""TF's detections from every zoo architecture, with the configs as shipped: the parity table.

    python -m benchmarks.accuracy.tfod_parity_table --out runs/parity            # all the rows
    python -m benchmarks.accuracy.tfod_parity_table --out runs/parity --configs NAME [NAME ...]

For each zoo pipeline.config (``../shared/data/tfod/configs``, as shipped: nothing edited,
nothing overridden; a keypoint config's ``keypoint_label_map_path`` is set, as TF needs), the
TF side (``benchmarks.peers.tfod_parity`` under the TF peer's
Python) writes a checkpoint of the config's detector with drawn weights and batch-norm
statistics (scores spread) in the zoo's layout and TF's own detections on real non-square JPEG
photos (``tf.io.decode_jpeg``, ``preprocess``, ``predict``, ``postprocess``). The jaxdet side
is ``jaxdet predict --pipeline-config CONFIG --checkpoint DIR/checkpoint/ckpt-0 PHOTOS`` (its
Python function, ``predict_images``). Each of TF's top 20 detections of each photo must have a
jaxdet detection of the same class with box IoU >= 0.98 and |score difference| <= 2e-3
(matched as sets); keypoints within 1 pixel; masks (TF's pasted into the photo as its exporter
does) of IoU >= 0.98 with jaxdet's. Prints one JSON object: per config the matched
count, the worst IoU and score difference among the matches, the worst keypoint distance,
or the one-line reason a side could not run it.

The photos: ``tests/data/fixtures/jpeg`` (a 4:2:0 landscape and a portrait) and, when
present, ``../shared/data/images``. The TF side needs the peer
(``../shared/peer/setup_tfod.sh``; ``--tf-python`` / ``--tfod-src`` as the other peer
benchmarks); ``--reuse`` compares against TF outputs already in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common

ROOT = common.ROOT
CONFIGS = common.SHARED_DATA / "tfod" / "configs"
ROWS = [
    "ssd_mobilenet_v2_320x320_coco17_tpu-8",
    "ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8",
    "ssd_mobilenet_v2_fpnlite_640x640_coco17_tpu-8",
    "ssd_mobilenet_v1_fpn_640x640_coco17_tpu-8",
    "ssd_resnet50_v1_fpn_640x640_coco17_tpu-8",
    "ssd_resnet101_v1_fpn_640x640_coco17_tpu-8",
    "ssd_resnet152_v1_fpn_640x640_coco17_tpu-8",
    "ssd_efficientdet_d0_512x512_coco17_tpu-8",
    "ssd_efficientdet_d1_640x640_coco17_tpu-8",
    "centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8",
    "centernet_hourglass104_512x512_coco17_tpu-8",
    "faster_rcnn_resnet50_v1_640x640_coco17_tpu-8",
    "faster_rcnn_resnet50_v1_fpn_640x640_coco17_tpu-8",
    "mask_rcnn_inception_resnet_v2_1024x1024_coco17_gpu-8",
    "center_net_deepmac_512x512_voc_only_tpu-32",
]
PHOTOS = [ROOT / "tests" / "data" / "fixtures" / "jpeg" / n
          for n in ("photo_420_q90.jpg", "photo_portrait_420.jpg")]
SHARED_PHOTOS = [common.SHARED_DATA / "images" / n
                 for n in ("image1.jpg", "image2.jpg")]
TOP, MIN_IOU, MAX_DSCORE, MAX_KEYPOINT_PX = 20, 0.98, 2e-3, 1.0
MIN_MASK_IOU = 0.98


KEYPOINT_LABEL_MAP = (ROOT / "tests" / "interop" / "fixtures" /
                      "tf_centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8" / "label_map.pbtxt")
PLACEHOLDER = 'keypoint_label_map_path: "PATH_TO_BE_CONFIGURED"'


def prepared_config(name: str, out: Path) -> Path:
    """The zoo config as shipped, but for the one path TF cannot build without: a keypoint
    config's ``keypoint_label_map_path`` (the zoo tarball's label map of COCO's 17 person
    keypoints, as a user sets it)."""
    shipped = CONFIGS / f"{name}.config"
    text = shipped.read_text()
    if PLACEHOLDER not in text:
        return shipped
    path = out / f"{name}.config"
    path.write_text(text.replace(PLACEHOLDER, f'keypoint_label_map_path: "{KEYPOINT_LABEL_MAP}"'))
    return path


def run_tf(args, names: list[str], out: Path, photos: list[Path]) -> dict[str, str]:
    """TF's checkpoints and detections, one peer process per config -> failures by name."""
    python, env = common.tf_peer(args)
    failed = {}
    for name in names:
        done = subprocess.run(common.peer_command(
            python, "tfod_parity", "--out", str(out), "--photos", *map(str, photos), "--",
            str(prepared_config(name, out))), capture_output=True, text=True, env=env,
            check=False)
        if done.returncode != 0:
            failed[name] = done.stderr.strip().splitlines()[-1][:300]
        print(json.dumps({"tf": name, "ok": done.returncode == 0}), file=sys.stderr, flush=True)
    return failed


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two [x0, y0, x1, y1] boxes. Two boxes flat along the same axis (TF clips the
    box of a center in the padding below or right of the photo to the photo's edge: zero
    height or width) compare as 1-D intervals along the other axis, at the same edge."""
    flat = [bool(np.isclose(a[i + 2], a[i]) and np.isclose(b[i + 2], b[i])
                 and abs(a[i] - b[i]) <= 0.5) for i in (0, 1)]
    if any(flat):
        i = 1 if flat[0] else 0  # the axis that is not flat
        if all(flat):
            return 1.0
        inter = max(0.0, min(a[i + 2], b[i + 2]) - max(a[i], b[i]))
        union = max(a[i + 2], b[i + 2]) - min(a[i], b[i])
        return inter / union if union > 0 else 0.0
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def mask_iou(tf_box_mask: np.ndarray, tf_box: np.ndarray, det: dict, height: int,
             width: int) -> float:
    """IoU of one detection's masks in the ``height x width`` image: TF's box-relative mask
    ``[h, w]`` (probabilities) in its normalized box ``[ymin, xmin, ymax, xmax]``, pasted as
    TF's exporter pastes it (``ops.reframe_box_masks_to_image_masks``, then ``> 0.5``: jaxdet's
    ``paste_box_masks`` computes the same), against jaxdet's ``det["segmentation"]`` (the RLE
    ``jaxdet predict`` writes). 1.0 when both are empty."""
    from jaxdet.eval.coco_mask_eval import paste_box_masks, rle_to_masks

    theirs = paste_box_masks(np.asarray(tf_box_mask)[None], np.asarray(tf_box)[None],
                             height, width)[0].astype(bool)
    mine = rle_to_masks([det["segmentation"]], height, width)[0].astype(bool)
    union = int(np.logical_or(theirs, mine).sum())
    return float(np.logical_and(theirs, mine).sum()) / union if union else 1.0


def compare(entry: dict, tf: dict, photo: str, ids: list[int]) -> dict:
    """TF's top detections of ``photo`` against jaxdet's ``entry`` (predictions.json's)."""
    height, width = entry["height"], entry["width"]
    ours = entry["detections"]
    scale = np.array([height, width, height, width])
    top = min(TOP, int(tf[f"{photo}/num_detections"]))
    free = list(range(len(ours)))
    ious, dscores, kp_px, mask_ious = [], [], [], []
    for k in range(top):
        y0, x0, y1, x1 = tf[f"{photo}/boxes"][k] * scale
        want = np.array([x0, y0, x1, y1])
        cls, score = ids[int(tf[f"{photo}/classes"][k])], float(tf[f"{photo}/scores"][k])
        best = max((i for i in free if ours[i]["class_id"] == cls
                    and abs(ours[i]["score"] - score) <= MAX_DSCORE),
                   key=lambda i: _iou(np.array(ours[i]["box_xyxy"]), want), default=None)
        if best is None or _iou(np.array(ours[best]["box_xyxy"]), want) < MIN_IOU:
            continue
        free.remove(best)
        ious.append(_iou(np.array(ours[best]["box_xyxy"]), want))
        dscores.append(abs(ours[best]["score"] - score))
        if f"{photo}/keypoints" in tf and "keypoints" in ours[best]:
            theirs = tf[f"{photo}/keypoints"][k] * np.array([height, width])  # (y, x)
            mine = np.array(ours[best]["keypoints"]).reshape(-1, 3)[:, [1, 0]]
            kp_px.append(float(np.abs(mine - theirs).max()))
        if f"{photo}/masks" in tf and "segmentation" in ours[best]:
            mask_ious.append(mask_iou(tf[f"{photo}/masks"][k], tf[f"{photo}/boxes"][k],
                                      ours[best], height, width))
    return {"matched": len(ious), "of": top, "worst_iou": min(ious, default=None),
            "worst_dscore": max(dscores, default=None), "worst_keypoint_px":
            max(kp_px, default=None), "worst_mask_iou": min(mask_ious, default=None)}


def run_jaxdet(name: str, home: Path, photos: list[Path]) -> dict:
    """``jaxdet predict --pipeline-config --checkpoint`` on the photos, compared with TF's."""
    from jaxdet.config.tfod import load_pipeline_config
    from jaxdet.jobs.predict import predict_images
    from jaxdet.results.labels import class_labels

    tf = dict(np.load(home / "tf.npz"))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_pipeline_config(home / "pipeline.config")
        # TF's CenterNet keeps its max_box_predictions peaks whatever their score; jaxdet's
        # writes those >= post_processing.score_threshold (0.1) unless told otherwise
        everything = 0.0 if config.model.type == "center_net" else None
        summary = predict_images(config, None, [str(p) for p in photos], Path(tmp) / "out",
                                 checkpoint=home / "checkpoint" / "ckpt-0", batch_size=1,
                                 progress=False, score_threshold=everything)
        ids, _ = class_labels(config, Path(tmp) / "out")
    by_photo = {Path(e["image"]).name: e for e in summary.images}
    per_photo = {p.name: compare(by_photo[p.name], tf, p.name, ids) for p in photos}
    row = {"matched": sum(r["matched"] for r in per_photo.values()),
           "of": sum(r["of"] for r in per_photo.values()),
           "seconds": round(time.perf_counter() - t0, 1)}
    for key, pick in (("worst_iou", min), ("worst_dscore", max), ("worst_keypoint_px", max),
                      ("worst_mask_iou", min)):
        values = [r[key] for r in per_photo.values() if r[key] is not None]
        row[key] = round(pick(values), 6) if values else None
    row["photos"] = per_photo
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", nargs="+", default=ROWS)
    parser.add_argument("--reuse", action="store_true",
                        help="compare against TF outputs already in --out")
    common.add_tf_peer_arguments(parser)
    args = parser.parse_args(argv)
    logging.getLogger("jaxdet").setLevel(logging.ERROR)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    photos = PHOTOS + [p for p in SHARED_PHOTOS if p.is_file()]
    todo = [n for n in args.configs
            if not (args.reuse and (out / n / "tf.npz").is_file())]
    failed = run_tf(args, todo, out, photos) if todo else {}
    rows = {}
    for name in args.configs:
        if name in failed:
            rows[name] = {"error": f"TF: {failed[name]}"}
            continue
        try:
            rows[name] = run_jaxdet(name, out / name, photos)
        except Exception as err:  # noqa: BLE001  (a row says why it could not run)
            rows[name] = {"error": f"jaxdet: {type(err).__name__}: {str(err)[:300]}"}
        print(json.dumps({name: {k: v for k, v in rows[name].items() if k != "photos"}}),
              file=sys.stderr, flush=True)
    result = {"benchmark": "tfod_parity_table", "photos": [p.name for p in photos],
              "criteria": {"top": TOP, "min_iou": MIN_IOU, "max_dscore": MAX_DSCORE,
                           "max_keypoint_px": MAX_KEYPOINT_PX, "min_mask_iou": MIN_MASK_IOU},
              "rows": rows, "machine": common.machine_info(devices=False)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
