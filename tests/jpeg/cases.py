"""Writes the JPEG decoding cases of tests/jpeg_decoding.rs, decoded by simplejpeg's libjpeg-turbo.

    python tests/jpeg/cases.py OUT_DIR

For each of scikit-image's photographs (the project's photographs, scripts/photos.sh): the
picture resized to 640x480 and saved at quality 90 with 4:4:4, 4:2:2 and 4:2:0 chroma (Pillow's
encoder, as a camera driver would write them; one also as a progressive JPEG), the two photographs shipped as JPEG as they are,
and the grey photograph as a grey JPEG. Beside each NAME.jpg it writes NAME.pixels, the
reference decoding (RGB, or grey), and prints one line per case: NAME WIDTH HEIGHT CHANNELS.
The reference is simplejpeg (a separate build of libjpeg-turbo, on PyPI) asked for what lop
uses: the accurate integer IDCT and merged ("fast") chroma upsampling, which makes each MCU row
decode on its own (codec/src/turbo.rs says why). Pillow, which writes the JPEGs, cannot be
asked for that upsampling.
"""
import os
import sys

import simplejpeg
from PIL import Image, features

import importlib.util

out = sys.argv[1]
print(f"# written by Pillow (libjpeg-turbo {features.version('libjpeg_turbo')}), decoded by simplejpeg {simplejpeg.__version__}", file=sys.stderr)
data = os.path.join(os.path.dirname(importlib.util.find_spec("skimage").origin), "data")


def case(name, path, mode):
    with open(path, "rb") as f:
        data = f.read()
    colorspace = "GRAY" if mode == "L" else "RGB"
    pixels = simplejpeg.decode_jpeg(data, colorspace=colorspace, fastdct=False, fastupsample=True)
    with open(os.path.join(out, name + ".pixels"), "wb") as f:
        f.write(pixels.tobytes())
    print(name, pixels.shape[1], pixels.shape[0], 1 if mode == "L" else 3)


for photo in ["astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg", "retina.jpg"]:
    stem = photo.split(".")[0]
    pic = Image.open(os.path.join(data, photo)).convert("RGB").resize((640, 480), Image.BILINEAR)
    for sampling, label in [(0, "444"), (1, "422"), (2, "420")]:
        name = f"{stem}-{label}"
        path = os.path.join(out, name + ".jpg")
        pic.save(path, quality=90, subsampling=sampling)
        case(name, path, "RGB")
    if stem == "astronaut":
        # A progressive JPEG (some cameras and web images): under passthrough the robot rewrites
        # it as a sequential one of the same coefficients before cutting it by rows.
        name = f"{stem}-420-progressive"
        path = os.path.join(out, name + ".jpg")
        pic.save(path, quality=90, subsampling=2, progressive=True)
        case(name, path, "RGB")
for shipped in ["rocket.jpg", "retina.jpg"]:
    name = "shipped-" + shipped.split(".")[0]
    path = os.path.join(out, name + ".jpg")
    with open(os.path.join(data, shipped), "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    case(name, path, "RGB")
grey = Image.open(os.path.join(data, "camera.png")).convert("L")
grey.save(os.path.join(out, "camera-grey.jpg"), quality=90)
case("camera-grey", os.path.join(out, "camera-grey.jpg"), "L")
