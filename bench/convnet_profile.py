"""Per-kernel time of bench/torch_compile.py's ConvNet under torch.compile(backend="prism"): one batch size,
PRISM_PROFILE=1, the table Prism prints for the program when it is freed (per kernel over the timed batches).

    python3 bench/convnet_profile.py --batch 32 --iters 60 --threads 2
"""
import argparse
import os
import sys
import time

os.environ["PRISM_PROFILE"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch_compile import ConvNet  # noqa: E402  (also puts the build tree's package on the path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import prism.torch_backend as tb

    tb.register()
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="prism", dynamic=True, options={"threads": args.threads})
        x = torch.randn(args.batch, 3, 64, 64)
        compiled(x)
        start = time.perf_counter()
        for _ in range(args.iters):
            compiled(x)
        ms = (time.perf_counter() - start) / args.iters * 1e3
    print(f"batch {args.batch}: {ms:.3f} ms a batch over {args.iters} (with the profile's timing)", flush=True)


if __name__ == "__main__":
    main()
