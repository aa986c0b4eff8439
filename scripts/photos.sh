#!/usr/bin/env bash
# Prints a folder of real photographs for `lop bench --frames` and `lop codecs --frames`: the
# colour photographs scikit-image ships (astronaut, cat, coffee, motorcycle, rocket, retina),
# linked into target/photos/. scripts/setup.sh installs scikit-image (its data only, no
# dependencies) into .venv.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data=$("$root/.venv/bin/python" -c 'import importlib.util, os; s = importlib.util.find_spec("skimage"); print(os.path.join(os.path.dirname(s.origin), "data"))' 2>/dev/null || true)
if [ -z "$data" ] || [ ! -f "$data/astronaut.png" ]; then
  echo "photos: scikit-image's photographs are missing; run scripts/setup.sh" >&2
  exit 1
fi
out="$root/target/photos"
mkdir -p "$out"
for f in astronaut.png chelsea.png coffee.png motorcycle_left.png rocket.jpg retina.jpg; do
  ln -sf "$data/$f" "$out/$f"
done
echo "$out"
