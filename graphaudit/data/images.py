"""Image files (.png/.jpg/.jpeg/.bmp) decoded with Pillow to uint8 RGB ``[1,H,W,3]`` pixels, one at a time."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .spec import MAX_STATS_ELEMENTS, data_error, file_error, one_line

__all__ = ["MAX_IMAGE_PIXELS", "check_image", "ImageChunk"]

#: Largest image decoded (width x height): a bigger one is refused from its header (decompression bombs). Images
#: are fed unresized, so this is far above any model input (4096 x 4096); decoding one costs about 0.4 GB with the
#: per-stage float64 conversions.
MAX_IMAGE_PIXELS = 4096 * 4096

# Pillow raises many exception types on bad files (OSError, SyntaxError, ValueError, struct.error,
# DecompressionBombError, EOFError, IndexError...): every one of them means "cannot decode".
_PIL_ERRORS = (Exception,)


def _pil(label: Any) -> Any:
    try:
        from PIL import Image, ImageOps
    except ImportError:
        raise data_error(label, "decoding images needs Pillow (pip install pillow)") from None
    return Image, ImageOps


def check_image(path: Path) -> None:
    """Identify an image from its header (no pixel decoding), and see that a PNG or JPEG file is complete.

    A PNG ends with its IEND chunk and a JPEG with the EOI marker (PNG spec section 5.6; ITU T.81 B.2.1): a file
    cut short (a copy that stopped) lacks them and Pillow fails on its pixels only when they are decoded, in the
    middle of a run. Reading the last bytes costs nothing; a file that does not end so (trailing bytes after the
    end, or cut) is decoded once here to tell which. A PNG's chunks are checked against their CRC-32 (Pillow's
    ``verify``, no pixel decoding: bytes changed mid-file), and a BMP, which has no end marker and no compression,
    is decoded once (a file cut short).

    Raises
    ------
    DataFileError
        Pillow cannot identify or decode the file, the image has more than :data:`MAX_IMAGE_PIXELS` pixels or its
        RGB pixels more than :data:`graphaudit.data.spec.MAX_STATS_ELEMENTS` values (the most graphaudit reads per
        sample), or its mode (16-bit, float) does not convert to uint8 RGB without loss.
    DataError
        Pillow is missing.
    """
    Image, _ = _pil(path)
    try:
        with warnings.catch_warnings():  # Pillow's multi-line DecompressionBombWarning: our own cap below says it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                mode, fmt = img.mode, img.format
                width, height = img.size
    except FileNotFoundError:
        raise file_error(path, "no such file") from None
    except _PIL_ERRORS as e:
        raise file_error(path, f"Pillow cannot decode this image ({one_line(e)})") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise file_error(path, f"image of {width}x{height} pixels is larger than {MAX_IMAGE_PIXELS} pixels; "
                               "refusing to decode")
    if width * height * 3 > MAX_STATS_ELEMENTS:  # decoded to [1,H,W,3] and fed unresized
        raise file_error(path, f"image of {width}x{height} pixels is {width * height * 3:,} RGB values, more than the "
                               f"{MAX_STATS_ELEMENTS:,} graphaudit reads per sample; not decoded")
    if mode in ("I", "F") or mode.startswith("I;"):
        raise file_error(path, f"image mode {mode} (16-bit or float) cannot be decoded to uint8 RGB without loss")
    if (fmt in _ENDS and not _ends_with(path, _ENDS[fmt])) or fmt in ("PNG", "BMP"):
        try:
            with Image.open(path) as img:
                if fmt == "PNG" and _ends_with(path, _ENDS[fmt]):
                    img.verify()
                else:
                    img.load()
        except _PIL_ERRORS as e:
            raise file_error(path, f"Pillow cannot decode this image ({one_line(e)})") from None


#: The bytes a complete file of the format ends with: PNG's IEND chunk (length 0, type, CRC), JPEG's EOI marker.
_ENDS = {"PNG": b"\x00\x00\x00\x00IEND\xaeB`\x82", "JPEG": b"\xff\xd9"}


def _ends_with(path: Path, tail: bytes) -> bool:
    """The file's last bytes are ``tail`` (False when it is shorter or cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() < len(tail):
                return False
            fh.seek(-len(tail), 2)
            return fh.read(len(tail)) == tail
    except OSError:
        return False


class ImageChunk:
    """One image file decoded to uint8 RGB ``[1,H,W,3]`` (EXIF orientation applied, alpha dropped)."""

    count = 1

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        """Yield the one sample, input name -> pixels (DataError naming the file when it cannot be decoded)."""
        Image, ImageOps = _pil(self.path)
        try:
            with Image.open(self.path) as img:
                img = ImageOps.exif_transpose(img)
                arr = np.array(img.convert("RGB"), dtype=np.uint8)
        except FileNotFoundError:
            raise file_error(self.path, "no such file") from None
        except _PIL_ERRORS as e:
            raise file_error(self.path, f"Pillow cannot decode this image ({one_line(e)})") from None
        yield {self.name: arr[np.newaxis]}
