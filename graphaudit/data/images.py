"""Image files (.png/.jpg/.jpeg/.bmp) decoded with Pillow to uint8 RGB ``[1,H,W,3]`` pixels, one at a time."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .spec import data_error, file_error, one_line

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
    """Identify an image from its header (no pixel decoding).

    Raises
    ------
    DataError
        Pillow is missing or cannot identify the file, the image has more than :data:`MAX_IMAGE_PIXELS`
        pixels, or its mode (16-bit, float) does not convert to uint8 RGB without loss.
    """
    Image, _ = _pil(path)
    try:
        with warnings.catch_warnings():  # Pillow's multi-line DecompressionBombWarning: our own cap below says it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                mode = img.mode
                width, height = img.size
    except FileNotFoundError:
        raise file_error(path, "no such file") from None
    except _PIL_ERRORS as e:
        raise file_error(path, f"Pillow cannot decode this image ({one_line(e)})") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise file_error(path, f"image of {width}x{height} pixels is larger than {MAX_IMAGE_PIXELS} pixels; "
                               "refusing to decode")
    if mode in ("I", "F") or mode.startswith("I;"):
        raise file_error(path, f"image mode {mode} (16-bit or float) cannot be decoded to uint8 RGB without loss")


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
