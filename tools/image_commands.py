"""The `skopeo copy` commands that put the images of an instances file into an images directory:
run them where a registry is reachable (no Docker daemon needed), then copy the directory to the
machine that evaluates or trains (docs/HARNESS.md, "Images").

    python tools/image_commands.py --instances FILE --images DIR [--image-namespace NS] [--field FIELD=COLUMN ...] > fetch.sh

One line per image that DIR does not hold yet (each image once, however many instances name it):
the image a row names (`image_name`, `docker_image`, or `--field image=COLUMN`), else SWE-bench's
name from the instance id in `--image-namespace` (swebench; SWE-rebench's: swerebench).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.commands.common import field_pair  # noqa: E402
from swe_rl_jax.data.sources import load_instances  # noqa: E402
from swe_rl_jax.files import input_file  # noqa: E402
from swe_rl_jax.harness.images import (SWEBENCH_NAMESPACE, ImageOptions, fetch_command, find_image,  # noqa: E402
                                       instance_image_name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", required=True)
    p.add_argument("--images", required=True, help="the images directory (made by the first skopeo copy)")
    p.add_argument("--image-namespace", default=SWEBENCH_NAMESPACE)
    p.add_argument("--field", action="append", default=[], type=field_pair, metavar="FIELD=COLUMN")
    args = p.parse_args(argv)
    options = ImageOptions(dir=args.images, namespace=args.image_namespace)
    names = dict.fromkeys(instance_image_name(i, options) for i in
                          load_instances(input_file(args.instances, "--instances"), require_patch=False,
                                         fields=dict(args.field)))
    images = Path(options.dir)
    for name in names:
        if not (images.is_dir() and find_image(images, name)):
            print(fetch_command(name, options.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
