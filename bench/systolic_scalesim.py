#!/usr/bin/env python3
"""Prism's systolic timing model against SCALE-Sim (PyPI `scalesim`), a cycle-level simulator.

For products [M x K] . [K x N] on one array of a built-in description (edge: SCALE-Sim's own default
32x32 array), in both dataflows, prints Prism's array cycles (build/prism_systolic_cycles) beside
SCALE-Sim's compute cycles and their difference. SCALE-Sim runs with the description's SRAM sizes and a
large DRAM bandwidth, so that its stalls are not what is compared (Prism counts HBM apart).

    python3 bench/systolic_scalesim.py [--description edge] [--shapes 64,64,64 1,256,512 ...]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = ["64,64,64", "1,256,512", "128,96,200", "512,128,64", "33,70,45", "256,256,256"]


def prism_cycles(description, shapes):
    tool = os.path.join(ROOT, "build", "prism_systolic_cycles")
    out = subprocess.run([tool, description] + shapes, check=True, capture_output=True, text=True).stdout
    return [json.loads(line)["cycles"] for line in out.splitlines()]


def scalesim_cycles(desc, dataflow, shapes, work):
    import numpy as np
    import scalesim.memory.double_buffered_scratchpad_mem as dbsm
    import scalesim.memory.read_buffer as rb
    from scalesim.scale_sim import scalesim  # PyPI scalesim (bench/setup.sh installs it)

    # scalesim 3.0.0 takes int() of max() over an [n, 1] array, which NumPy 2 refuses: the largest
    # element is what it means.
    def largest(*args):
        return max(np.max(a) for a in args) if len(args) > 1 else np.max(args[0])

    rb.max = dbsm.max = largest

    cfg = os.path.join(work, f"{dataflow}.cfg")
    with open(cfg, "w") as f:
        f.write(f"""[general]
run_name = prism_{dataflow}

[architecture_presets]
ArrayHeight: {desc['array']['rows']}
ArrayWidth: {desc['array']['cols']}
IfmapSramSzkB: {desc['sram_kib']['inputs']}
FilterSramSzkB: {desc['sram_kib']['weights']}
OfmapSramSzkB: {desc['sram_kib']['outputs']}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth : 1000
Dataflow : {dataflow}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: USER
UseRamulatorTrace: False
""")
    topo = os.path.join(work, f"{dataflow}_gemm.csv")
    with open(topo, "w") as f:
        f.write("Layer, M, N, K,\n")
        for i, s in enumerate(shapes):
            m, n, k = s.split(",")
            f.write(f"g{i}, {m}, {n}, {k},\n")
    layout = os.path.join(work, "layout.csv")  # required, unused without custom layouts
    with open(layout, "w") as f:
        f.write("Layer name,\n")
    out = os.path.join(work, dataflow)
    os.makedirs(out, exist_ok=True)
    sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
                   input_type_gemm=True)
    sim.run_scale(top_path=out)
    report = glob.glob(os.path.join(out, "**", "COMPUTE_REPORT.csv"), recursive=True)[0]
    rows = [line.split(",") for line in open(report).read().splitlines()[1:] if line.strip()]
    # Columns: LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, ...
    return [int(float(r[2])) - int(float(r[3])) for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--description", default="edge", help="a built-in description (src/backends/systolic/descriptions)")
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="products as M,N,K")
    args = ap.parse_args()
    path = os.path.join(ROOT, "src", "backends", "systolic", "descriptions", args.description + ".json")
    desc = json.load(open(path))
    if "extends" in desc:
        sys.exit("use a description that extends none")
    print(f"| dataflow | M,N,K | Prism cycles | SCALE-Sim compute cycles | Prism / SCALE-Sim |")
    print(f"| --- | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as work:
        for dataflow in ("os", "ws"):
            variant = dict(desc)
            variant["array"] = dict(desc["array"], count=1,
                                    dataflow="output_stationary" if dataflow == "os" else "weight_stationary",
                                    weight_double_buffer=False)
            vpath = os.path.join(work, f"prism_{dataflow}.json")
            json.dump(variant, open(vpath, "w"))
            ours = prism_cycles(vpath, args.shapes)
            theirs = scalesim_cycles(desc, dataflow, args.shapes, work)
            for s, a, b in zip(args.shapes, ours, theirs):
                print(f"| {dataflow} | {s} | {a:.0f} | {b} | {a / b:.3f} |")


if __name__ == "__main__":
    main()
