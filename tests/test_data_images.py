"""ImageFolder tree -> uint8 shards (the ImageNet path), on real CIFAR-10 JPEGs and broken trees."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from naspipe.data import DataError, load_image, prepare_images

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CIFAR = SHARED / "cifar10-imagefolder"
CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(scope="module")
def cifar() -> Path:
    if not (CIFAR / "train").is_dir():
        pytest.skip(f"shared data not found at {CIFAR}")
    return CIFAR


@pytest.fixture(scope="module")
def shards(cifar: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cifar") / "shards"
    prepare_images(cifar, out, resize=36, crop=32, limit_per_class=20)
    return out


def test_shapes_labels_and_meta(shards: Path) -> None:
    for split in ("train", "val"):
        images = np.load(shards / f"{split}.images.npy")
        labels = np.load(shards / f"{split}.labels.npy")
        assert images.shape == (200, 3, 32, 32) and images.dtype == np.uint8
        assert labels.dtype == np.int64 and labels.tolist() == [c for c in range(10) for _ in range(20)]
        assert images.std() > 10  # real pixels, not zeros
    assert json.loads((shards / "classes.json").read_text(encoding="utf-8")) == CIFAR_CLASSES
    meta = json.loads((shards / "meta.json").read_text(encoding="utf-8"))
    assert (meta["resize"], meta["crop"], meta["num_classes"], meta["limit_per_class"]) == (36, 32, 10, 20)
    assert meta["splits"]["train"]["per_class"] == [20] * 10
    assert len(meta["splits"]["val"]["manifest_sha256"]) == 64


def test_pixels_match_reference_pipeline(shards: Path, cifar: Path) -> None:
    """Same as torchvision's Resize(36) + CenterCrop(32) on PIL: bilinear 32->36, crop offset 2."""
    images = np.load(shards / "val.images.npy")
    for row, (label, name) in enumerate([(0, "0000.jpg"), (0, "0019.jpg")]):
        with Image.open(cifar / "val" / CIFAR_CLASSES[label] / name) as image:
            resized = image.convert("RGB").resize((36, 36), Image.Resampling.BILINEAR)
        expected = np.asarray(resized.crop((2, 2, 34, 34))).transpose(2, 0, 1)
        assert np.array_equal(images[0 if row == 0 else 19], expected)


def test_files_listed_in_torchvision_order(cifar: Path, shards: Path) -> None:
    first_bird = sorted((cifar / "train" / "bird").iterdir())[0]
    images = np.load(shards / "train.images.npy")
    assert np.array_equal(images[2 * 20], load_image(first_bird, 36, 32))


def test_workers_give_identical_shards(cifar: Path, tmp_path: Path) -> None:
    one = prepare_images(cifar, tmp_path / "one", 40, 32, limit_per_class=3, splits=("val",))
    two = prepare_images(cifar, tmp_path / "two", 40, 32, limit_per_class=3, splits=("val",), workers=2)
    assert one == two
    for name in ("val.images.npy", "val.labels.npy", "classes.json", "meta.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


# ------------------------------------------------------------------ geometry


@pytest.mark.parametrize(
    ("size", "resize", "crop", "box"),
    [((40, 20), 10, 8, (6, 1, 14, 9)), ((20, 41), 10, 7, (2, 6, 9, 13)), ((16, 16), 16, 16, (0, 0, 16, 16))],
)
def test_resize_shorter_side_then_center_crop(
    tmp_path: Path, size: tuple[int, int], resize: int, crop: int, box: tuple[int, int, int, int]
) -> None:
    """Crop offsets use Python's round(), as torchvision does: round(6.5) == 6."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.png")
    width, height = size
    scale = resize / min(width, height)
    new_size = (resize, int(resize * height / width)) if width <= height else (int(resize * width / height), resize)
    assert abs(new_size[0] - width * scale) < 1 and abs(new_size[1] - height * scale) < 1
    reference = Image.fromarray(pixels)
    if new_size != size:
        reference = reference.resize(new_size, Image.Resampling.BILINEAR)
    expected = np.asarray(reference.crop(box)).transpose(2, 0, 1)
    assert np.array_equal(load_image(tmp_path / "x.png", resize, crop), expected)


def test_grayscale_and_palette_become_rgb(tmp_path: Path) -> None:
    Image.fromarray(np.full((8, 8), 77, dtype=np.uint8)).save(tmp_path / "g.png")
    array = load_image(tmp_path / "g.png", 8, 8)
    assert array.shape == (3, 8, 8) and (array == 77).all()


# ------------------------------------------------------------------ broken trees


def _tree(root: Path, layout: dict[str, dict[str, int]]) -> Path:
    rng = np.random.default_rng(0)
    for split, classes in layout.items():
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def test_corrupt_images_all_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree", {"train": {"a": 3, "b": 3}, "val": {"a": 1, "b": 1}})
    (root / "train" / "a" / "bad.JPEG").write_bytes(b"this is not a jpeg")
    good = (root / "val" / "b" / "0.png").read_bytes()
    (root / "val" / "b" / "0.png").write_bytes(good[: len(good) // 2])
    (root / "train" / "b" / "notes.txt").write_text("ignored: not an image extension", encoding="utf-8")
    with pytest.raises(DataError) as info:
        prepare_images(root, tmp_path / "out", 8, 8)
    message = str(info.value)
    assert "\n" not in message
    assert "2 unreadable image(s)" in message
    assert str(root / "train" / "a" / "bad.JPEG") in message
    assert str(root / "val" / "b" / "0.png") in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]  # no output, no temp dir


def test_many_bad_images_message_is_bounded(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree", {"train": {"a": 1}, "val": {"a": 1}})
    for i in range(9):
        (root / "train" / "a" / f"bad{i}.jpg").write_bytes(b"")
    with pytest.raises(DataError, match=r"9 unreadable image\(s\): .*bad4\.jpg .*\.\.\. and 4 more$"):
        prepare_images(root, tmp_path / "out", 8, 8)


def test_structure_errors(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t1", {"train": {"a": 1, "b": 1}, "val": {"a": 1}})
    with pytest.raises(DataError, match=r"t1/val: classes differ from .*t1/train \(extra: \[\], missing: \['b'\]\)"):
        prepare_images(root, tmp_path / "out", 8, 8)
    root = _tree(tmp_path / "t2", {"train": {"a": 1}})
    (root / "train" / "empty").mkdir()
    with pytest.raises(DataError, match=r"t2/train/empty: no image files"):
        prepare_images(root, tmp_path / "out", 8, 8, splits=("train",))
    with pytest.raises(DataError, match=r"t3/train: no such directory"):
        prepare_images(tmp_path / "t3", tmp_path / "out", 8, 8)
    with pytest.raises(DataError, match=r"crop \(9\) must not exceed resize \(8\)"):
        prepare_images(root, tmp_path / "out", 8, 9)
